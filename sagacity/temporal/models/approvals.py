"""The approval gate across Temporal: the request opened and closed, and the call waiting on it."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

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


class ApprovalOpened(BaseModel):
    """The AWAITING_APPROVAL row and the request as stored (input redacted, its hash)."""

    rows: list[RowRef]
    input: str
    input_hash: str
    #: sha-256 of the unredacted input the request was made for
    raw_input_hash: str | None = None
    #: where ``input`` hides a field (JSON Pointers)
    hidden: list[str] = Field(default_factory=list)


class ApprovalClose(BaseModel):
    saga_id: str
    journal_seq: int


class PendingApproval(BaseModel):
    journal_seq: int
    tool_name: str
    #: the request as stored: secrets redacted (a keyed fingerprint each, or removed)
    input_json: str
    input_hash: str
    deadline_s: float
    #: where ``input_json`` hides a field (JSON Pointers)
    hidden: list[str] = Field(default_factory=list)


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
