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

#: ``tool_name`` of the REJECTED row ``sagacity saga rollback`` writes before it undoes an ended
#: saga's live effects: who rolled the saga back, and why.
ROLLBACK = "sagacity-rollback"

#: how the ``reason`` of the approval gate's REJECTED row begins when it was written for a run
#: that ended (a reset, a rollback), not by anyone deciding the request: no rollback of the saga
SUPERSEDED = "superseded: "
