"""The approval gate across Temporal: the request opened and closed, and the call waiting on it."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, Field

from sagacity.approval_policy import ApprovalPolicy
from sagacity.rules import ApprovalRule
from sagacity.temporal.models.journal import RowRef


class ApprovalOpen(BaseModel):
    """Journal AWAITING_APPROVAL at ``seq`` and persist the approval request."""

    saga_id: str
    seq: int
    prev_hash: str
    tool_name: str
    input_json: str
    #: how long the saga waits for a decision: the request shows its deadline without a query
    deadline_s: float | None = None
    #: the tool's ``needs_approval`` rule that asked (None: an IRREVERSIBLE tool's request);
    #: left off the payload when None, so an unconditional request's payload is as it was
    rule: ApprovalRule | None = Field(default=None, exclude_if=lambda rule: rule is None)
    #: the tool's approval policy, recorded with the saga's starter in the request row (left
    #: off when None: only a tool declared with ``approval_policy`` has one)
    policy: ApprovalPolicy | None = Field(default=None, exclude_if=lambda p: p is None)
    started_by: str | None = Field(default=None, exclude_if=lambda s: s is None)


class ApprovalOpened(BaseModel):
    """The AWAITING_APPROVAL row and the request as stored (input redacted, its hash)."""

    rows: list[RowRef]
    input: str
    input_hash: str
    #: sha-256 of the unredacted input the request was made for
    raw_input_hash: str | None = None
    #: where ``input`` hides a field (JSON Pointers)
    hidden: list[str] = Field(default_factory=list)
    #: why the request's rule asked, as its row says (None: not a rule's request)
    why: str | None = Field(default=None, exclude_if=lambda why: why is None)


class ApprovalClose(BaseModel):
    saga_id: str
    journal_seq: int


#: how an escalation's notification went: ``sent`` (the webhook took it), ``recorded`` (no
#: webhook configured), ``unknown`` (a worker stopped mid-POST: not posted again), ``failed``
#: (every attempt failed), ``pending`` (still trying when the request was decided)
EscalationOutcome = Literal["sent", "recorded", "unknown", "failed", "pending"]


class Escalate(BaseModel):
    """Notify the next tier that the request at ``journal_seq`` is past its SLA, once."""

    saga_id: str
    journal_seq: int
    tool_name: str
    #: when the saga escalated (workflow time), which the request row records
    at: datetime
    #: how long the request had waited then, in seconds
    waited_s: float


class Escalated(BaseModel):
    """Where an escalation went (the webhook's scheme and host, never its secret path) and how."""

    to: str = ""
    outcome: EscalationOutcome


class Escalation(BaseModel):
    """A request's escalation, as the saga's ``status`` and the decision row show it."""

    at: datetime
    to: str = ""
    outcome: EscalationOutcome = "pending"


class QuorumStatus(BaseModel):
    """How far a request under an ``ApprovalPolicy`` is: who approved so far, of how many."""

    required: int
    #: the keyring group approvers come from ("": any principal)
    group: str = ""
    approved_by: list[str] = Field(default_factory=list)
    #: who started the saga (None: not said, so no one is refused as the starter)
    started_by: str | None = None
    starter_may_approve: bool = True


class PendingApproval(BaseModel):
    journal_seq: int
    tool_name: str
    #: the request as stored: secrets redacted (a keyed fingerprint each, or removed)
    input_json: str
    input_hash: str
    deadline_s: float
    #: where ``input_json`` hides a field (JSON Pointers)
    hidden: list[str] = Field(default_factory=list)
    #: why the tool's ``needs_approval`` rule asked ("rule 'large refund': amount 1500 > 1000");
    #: None for an IRREVERSIBLE tool's request, which always asks
    why: str | None = None
    #: the next tier was notified: the request is past its SLA (None: not escalated)
    escalation: Escalation | None = None
    #: the tool's approval policy and the co-approvals in so far (None: one approval decides)
    quorum: QuorumStatus | None = None


class EditCheck(BaseModel):
    """Check an approver's edited arguments for ``tool_name`` as a call's are checked."""

    saga_id: str
    tool_name: str
    args: dict[str, Any]


class EditChecked(BaseModel):
    """Edited arguments that fit the tool: as the journal will hold them (redacted as a call's
    INTENT is), and the SHA-256 of their unredacted canonical JSON."""

    input: str
    raw_input_hash: str
