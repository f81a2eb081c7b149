"""The one shape ``saga status --json`` prints: a running saga and an ended one alike.

A saga's workflow answers its ``status`` query while it runs and returns its result when it ends;
the two name the saga's state differently (``state``, ``status``) and hold different fields.
:class:`StatusReport` is what a user reads either way: ``state`` always, ``ended`` to tell the
two apart, the result (or what went wrong, and what was restored or corrected) once it ended.
A saga whose workflow closed unfinished (terminated, timed out, failed or canceled around the
engine) returned nothing: its report is what Temporal says of the end and its journal of what
it left live (:meth:`StatusReport.unfinished`).
``docs/status.schema.json`` is its JSON Schema, :func:`schema` generates it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from sagacity.temporal.models import (
    Compensating,
    Effect,
    ErrorInfo,
    HaltNotice,
    Head,
    PendingApproval,
    RowRef,
    SagaResult,
    SagaState,
    SagaStatus,
    Suspect,
)
from sagacity.tools import Reversibility

if TYPE_CHECKING:  # the Agents SDK takes seconds to import: only for an agent saga's result
    from sagacity.agents.workflow import AgentSagaResult

__all__ = ["AgentOutcome", "LeftLive", "StatusReport", "UndoneEffect", "Unfinished", "schema"]

#: how a saga ended whose workflow closed unfinished: Temporal's word, not the saga engine's (kept
#: out of :class:`SagaState`, which recorded histories hold)
Unfinished = Literal["terminated", "timed_out", "failed", "canceled"]


class UndoneEffect(BaseModel):
    """An effect the saga's compensation undid, and how that leaves the world."""

    tool_name: str
    call_seq: int
    reversibility: Reversibility
    #: ``restored``: the prior state is back (REVERSIBLE); ``corrected``: the original stays
    #: visible and a correction followed it (COMPENSATABLE: a correction email, a refund)
    undone_as: Literal["restored", "corrected"]
    #: what a correction returned (the correction email's id, say); None for a restored effect
    correction: Any = None

    @classmethod
    def of(cls, effect: Effect) -> UndoneEffect:
        return cls(
            tool_name=effect.tool_name,
            call_seq=effect.call_seq,
            reversibility=effect.reversibility,
            undone_as="corrected" if effect.undone_as == "corrected" else "restored",
            correction=effect.correction,
        )


class AgentOutcome(BaseModel):
    """An agent saga's own part of its result: what the agent said and the tool calls it made."""

    final_output: str | None = None
    #: each tool call the agent made: tool, arguments, status, output, seq, turn
    steps: list[dict[str, Any]] = Field(default_factory=list)
    #: each turn's final output, before any compensation
    turns: list[str] = Field(default_factory=list)
    #: what the agent was told after the saga compensated
    compensation_summary: str | None = None


class LeftLive(BaseModel):
    """An effect a saga whose workflow closed unfinished left live, as its journal tells it.

    The journal does not record a tool's reversibility (the worker's registry holds it), so
    this says what the journal does: the call, and certify's finding of it.
    """

    tool_name: str
    call_seq: int
    #: what the call did and that nothing undid it (certify's finding)
    detail: str


class StatusReport(BaseModel):
    """A saga's status, running or ended: ``sagacity saga status --json``."""

    saga_id: str
    #: where the saga is (running, awaiting_approval, ...) or how it ended (completed, ...;
    #: terminated, ... when its workflow closed unfinished)
    state: SagaState | Unfinished
    #: whether the saga has ended (its workflow closed)
    ended: bool
    #: the journal's head; None only for an unfinished end whose journal is out of reach
    head: Head | None
    #: what a completed saga returned
    result: Any = None
    #: why an ended saga did not complete
    error: ErrorInfo | None = None
    #: the effects its compensation undid, newest first (at most 1000; see ``compensated_count``)
    compensated: list[UndoneEffect] = Field(default_factory=list)
    compensated_count: int = 0
    compensation_failed: list[Effect] = Field(default_factory=list)
    #: effects an ended saga leaves in the world (an unfinished end's: as its journal tells them)
    live_effects: list[Effect | LeftLive] = Field(default_factory=list)
    #: a running saga's newest rows (at most 200; the journal has them all)
    rows: list[RowRef] = Field(default_factory=list)
    #: a running saga's newest live effects (``executed_count`` counts them all)
    executed: list[Effect] = Field(default_factory=list)
    executed_count: int = 0
    #: the tool whose call is in flight
    running: str | None = None
    pending_approval: PendingApproval | None = None
    suspect: Suspect | None = None
    refused_decisions: list[str] = Field(default_factory=list)
    #: the halt or quarantine the saga waits on
    halted: HaltNotice | None = None
    #: the effect being undone, while the saga compensates
    compensating: Compensating | None = None
    needs_attention: str | None = None
    #: an agent saga's final output and tool calls; None for any other saga
    agent: AgentOutcome | None = None

    @classmethod
    def of(cls, found: SagaStatus | SagaResult | AgentSagaResult) -> StatusReport:
        """The report of a running saga's status, or of an ended saga's result."""
        if isinstance(found, SagaStatus):
            return cls(ended=False, **found.model_dump())
        if isinstance(found, SagaResult):
            return cls(
                saga_id=found.saga_id,
                state=found.status,
                ended=True,
                head=found.head,
                result=found.value,
                error=found.error,
                compensated=[UndoneEffect.of(e) for e in found.compensated],
                compensated_count=found.compensated_count,
                compensation_failed=found.compensation_failed,
                live_effects=[*found.live_effects],
                needs_attention=found.needs_attention,
            )
        agent = AgentOutcome(
            final_output=found.final_output,
            steps=[step.model_dump(mode="json") for step in found.steps],
            turns=found.turns,
            compensation_summary=found.compensation_summary,
        )
        return cls.of(found.saga).model_copy(update={"agent": agent})

    @classmethod
    def unfinished(
        cls,
        saga_id: str,
        state: Unfinished,
        error: ErrorInfo,
        *,
        head: Head | None,
        live: list[LeftLive],
        needs_attention: str | None,
    ) -> StatusReport:
        """The report of a saga whose workflow closed unfinished: how, why, and what it left."""
        return cls(
            saga_id=saga_id,
            state=state,
            ended=True,
            head=head,
            error=error,
            live_effects=[*live],
            needs_attention=needs_attention,
        )


def schema() -> dict[str, Any]:
    """The JSON Schema of :class:`StatusReport`, as ``docs/status.schema.json`` holds it."""
    document = StatusReport.model_json_schema(mode="serialization")
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **document}
