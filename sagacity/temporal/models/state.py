"""A saga's states, and those that end it."""

from __future__ import annotations

from enum import StrEnum


class SagaState(StrEnum):
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUSPECT = "suspect"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    ABORTED = "aborted"
    #: an operator's halt or quarantine holds the saga before its next call or compensation
    HALTED = "halted"


TERMINAL_STATES = frozenset(
    {SagaState.COMPLETED, SagaState.COMPENSATED, SagaState.COMPENSATION_FAILED, SagaState.ABORTED}
)
