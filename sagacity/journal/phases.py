"""The eight journal phases, exactly as the schema document names them."""

from __future__ import annotations

from enum import StrEnum


class Phase(StrEnum):
    """What a journal row records about a tool call or an approval decision."""

    INTENT = "INTENT"
    EXECUTED = "EXECUTED"
    FAILED = "FAILED"
    COMPENSATED = "COMPENSATED"
    COMPENSATION_FAILED = "COMPENSATION_FAILED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    APPROVED = "APPROVED"
    REJECTED = "REJECTED"


#: ``tool_name`` of rows that record approval decisions rather than a tool's own call.
APPROVAL_GATE = "approval-gate"
