"""What a saga shows of itself: its ``status`` query and its result."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from sagacity.temporal.models.approvals import PendingApproval
from sagacity.temporal.models.calls import ErrorInfo, Suspect
from sagacity.temporal.models.effects import Compensating, Effect
from sagacity.temporal.models.halts import HaltNotice
from sagacity.temporal.models.journal import Head, RowRef
from sagacity.temporal.models.state import SagaState

#: rows (and effects) the ``status`` query returns, newest last; the journal has them all
STATUS_ROWS = 200
#: compensated effects a :class:`SagaResult` lists (payloads have a size limit)
RESULT_EFFECTS = 1000


class SagaResult(BaseModel):
    """How a saga ended, what it undid and what it leaves in the world."""

    saga_id: str
    status: SagaState
    value: Any = None
    error: ErrorInfo | None = None
    #: the newest :data:`RESULT_EFFECTS` compensated effects (``compensated_count`` has them all)
    compensated: list[Effect] = Field(default_factory=list)
    compensation_failed: list[Effect] = Field(default_factory=list)
    live_effects: list[Effect] = Field(default_factory=list)
    needs_attention: str | None = None
    head: Head
    compensated_count: int = 0


class SagaStatus(BaseModel):
    saga_id: str
    state: SagaState
    head: Head
    #: the newest rows (at most :data:`STATUS_ROWS`; the journal has them all)
    rows: list[RowRef]
    #: the newest live effects (at most :data:`STATUS_ROWS`; ``executed_count`` counts them all)
    executed: list[Effect]
    #: the tool whose call is in flight, if any
    running: str | None = None
    pending_approval: PendingApproval | None = None
    suspect: Suspect | None = None
    refused_decisions: list[str] = Field(default_factory=list)
    needs_attention: str | None = None
    executed_count: int = 0
    #: the halt or quarantine the saga waits on, if any
    halted: HaltNotice | None = None
    #: the effect being undone, while the saga compensates
    compensating: Compensating | None = None
