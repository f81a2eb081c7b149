"""What a saga hands from one run to the next by continue-as-new."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from sagacity.temporal.models.calls import ErrorInfo
from sagacity.temporal.models.decisions import Abort
from sagacity.temporal.models.effects import Effect, EffectRefs, Original
from sagacity.temporal.models.halts import HaltNotice
from sagacity.temporal.models.journal import Head, RowRef


class SagaCarry(BaseModel):
    """A saga's state handed from one run to the next by continue-as-new: seq goes on."""

    saga_id: str
    head: Head
    rows: list[RowRef] = Field(default_factory=list)
    executed: EffectRefs = Field(default_factory=EffectRefs)
    adoptable: list[Effect] = Field(default_factory=list)
    failures: list[ErrorInfo] = Field(default_factory=list)
    needs_attention: str | None = None
    refused: list[str] = Field(default_factory=list)
    decided: list[int] = Field(default_factory=list)
    abort: Abort | None = None
    #: how ``abort`` came: as a signal (its sender is checked), by a Temporal cancel, or for an
    #: operator's halt (whose signature proves who halted); none of them: the workflow's own code
    abort_signalled: bool = False
    cancelled: bool = False
    abort_halt: HaltNotice | None = None
    #: set when the saga was compensating: why, and what is undone, failed or left so far
    error: ErrorInfo | None = None
    compensated: EffectRefs = Field(default_factory=EffectRefs)
    compensation_failed: EffectRefs = Field(default_factory=EffectRefs)
    live: EffectRefs = Field(default_factory=EffectRefs)
    #: the unredacted input and result of live effects whose journal rows are redacted
    originals: list[Original] = Field(default_factory=list)


class SagaProgress(BaseModel):
    """Where a declarative saga continued as new: the next step and earlier steps' results."""

    next_step: int
    results: dict[str, Any] = Field(default_factory=dict)
    #: the results redaction changed, as journaled (what the saga's result shows)
    shown: dict[str, Any] = Field(default_factory=dict)
    carry: SagaCarry
