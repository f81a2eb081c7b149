"""A tool call across Temporal: its request, how it ended, and a SUSPECT call's resolution."""

from __future__ import annotations

from enum import StrEnum
from functools import cached_property
from typing import Any

from pydantic import BaseModel, Field

from sagacity.errors import ApprovalRejected
from sagacity.evidence.decisions import Signature
from sagacity.journal.canonical import to_json
from sagacity.temporal.models.decisions import Resolve
from sagacity.temporal.models.journal import RowDraft, RowRef, SagaOpen, SagaOpened
from sagacity.temporal.models.lean import Lean
from sagacity.temporal.models.state import SagaState


class Rejection(Lean):
    """A call a human (or the deadline) rejected: which tool, who, why, and the message to the
    caller (None when none was given), as the REJECTED row holds them."""

    tool: str
    by: str
    reason: str
    message: str | None = None


def rejection_of(error: BaseException) -> Rejection | None:
    """The rejection ``error`` tells of: a call rejected at its gate, saying who and why."""
    if not isinstance(error, ApprovalRejected) or error.tool is None or error.by is None:
        return None
    return Rejection(tool=error.tool, by=error.by, reason=error.reason or "", message=error.message)


class ErrorInfo(Lean):
    """Why a call or a saga failed: the error's type and message; ``rejection`` when a human
    rejected the call (left out of the payload otherwise)."""

    type: str
    message: str
    rejection: Rejection | None = None


class CallRequest(Lean):
    """One tool call: INTENT at ``seq``, its outcome at ``seq + 1``."""

    saga_id: str
    seq: int
    prev_hash: str
    tool_name: str
    args: dict[str, Any]
    #: seq of the AWAITING_APPROVAL row whose request must verify before the tool runs
    approval_seq: int | None = None
    #: sha-256 of the unredacted input when the approval was requested: the call about to run
    #: must be that one, whatever the redaction rules are by then
    approved_input_hash: str | None = None
    #: the stored request's ``input_hash`` when it was made: an edited request does not verify
    approved_request_hash: str | None = None
    #: the saga ends in this state if the call executes: its outcome row is sealed as the end
    seal_as: SagaState | None = None
    #: the head this call follows was sealed, or written by an earlier run: checkpoint INTENT,
    #: so a verifier never sees it as a row after the end while the call runs
    anchor_intent: bool = False
    #: who approved, and their signature: checked against the worker's keyring before INTENT
    approver: str | None = None
    approval_signature: Signature | None = None
    #: the approver edited the arguments: ``args`` are theirs, ``approved_input_hash`` their
    #: hash, and the signature is over an ``approve_edited`` statement naming it
    edited: bool = False
    #: a new saga's first call opens its journal: claimed (its steps checked first) before
    #: INTENT, in this activity rather than a local activity of its own
    opening: SagaOpen | None = None

    @cached_property
    def input_json(self) -> str:
        """The arguments as journaled; derived here rather than sent twice per call."""
        return to_json(self.args)


class CallStatus(StrEnum):
    EXECUTED = "executed"
    FAILED = "failed"
    #: the approved input did not verify; REJECTED was journaled instead of INTENT
    REFUSED = "refused"
    #: an opening call (``CallRequest.opening``) only opened the journal: the tool did not run,
    #: and the saga, now holding the catalog and the rows, calls it again
    OPENED = "opened"


class Journaled(BaseModel):
    """A call as the journal holds it, its secrets redacted: what status and results show."""

    input: dict[str, Any] = Field(default_factory=dict)
    result: Any = None


class CallOutcome(Lean):
    """How a call ended. ``result`` is what the tool returned, secrets and all (later steps and
    compensations get it); ``journaled`` is set when redaction changed the call's input or
    result, and is what the saga shows of it."""

    status: CallStatus
    result: Any = None
    error: ErrorInfo | None = None
    rows: list[RowRef]
    #: FAILED, and the tool may have taken effect before it failed: compensate it or tell a human
    effect_unknown: bool = False
    journaled: Journaled | None = None
    #: EXECUTED, but the workflow does not hold the tool's real result: too big to hand it
    #: (``error`` says so), or none is to be had (redacted in the row a retry read, never
    #: journaled); the compensation reads the journal, which says which (``read_result``)
    result_withheld: bool = False
    #: an opening call's answer to the open it made (what ``open_saga`` answers)
    opened: SagaOpened | None = None


def failure_payload(error: ErrorInfo, *, effect_unknown: bool) -> str:
    """A FAILED row's payload: the error, and whether the call may have taken effect."""
    return to_json(
        {
            "type": error.type,
            "message": error.message,
            "effect": "unknown" if effect_unknown else "none",
        }
    )


class ResolveRequest(BaseModel):
    """A human's word on the SUSPECT call whose INTENT is at ``call_seq``."""

    saga_id: str
    call_seq: int
    row: RowDraft
    #: the approval request the call ran under, consumed with the resolution
    approval_seq: int | None = None
    #: the human's resolution ``row`` records, checked against the worker's keyring and policy
    #: before it is written; None when no human spoke (an abort, a lost attempt)
    resolution: Resolve | None = None


class Resolved(BaseModel):
    """The SUSPECT call's outcome; ``recorded`` is False when the journal already held one."""

    outcome: CallOutcome
    recorded: bool


class Suspect(BaseModel):
    call_seq: int
    tool_name: str
    #: the call's input as its INTENT row journaled it (secrets redacted)
    input_json: str
    reason: str
    #: the INTENT row's chain hash: what a signed resolution names (empty when not known)
    intent_hash: str = ""
