"""The effects a saga's calls left, and their undoing: what is compensated and how it goes."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from sagacity.temporal.models.lean import Lean
from sagacity.temporal.models.state import SagaState
from sagacity.tools import Reversibility


class Effect(BaseModel):
    """A tool call that took effect (or may have), named by its INTENT seq.

    ``input`` and ``result`` are as journaled, secrets redacted; the saga keeps the originals
    apart, for the compensation.
    """

    tool_name: str
    call_seq: int
    reversibility: Reversibility
    input: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    #: the call FAILED with its effect unknown; compensating it must cope with no effect
    failed: bool = False
    #: carried across continue-as-new by reference: input and result are read from the journal
    by_ref: bool = False
    #: a COMPENSATABLE effect that was corrected: what the correction returned, as journaled
    #: (None when it returned nothing; an effect carried by reference has it in the journal)
    correction: Any = None

    @property
    def undone_as(self) -> str:
        """How undoing this effect leaves the world: ``corrected`` (COMPENSATABLE: the original
        stays visible, a correction follows it) or ``restored`` (the prior state is back)."""
        if self.reversibility is Reversibility.COMPENSATABLE:
            return "corrected"
        return "restored"


class EffectRefs(BaseModel):
    """Effects by reference, compact enough to carry tens of thousands across continue-as-new.

    ``seqs[i]`` is a call's INTENT seq and ``tools[tool_of[i]]`` its tool; ``failed`` lists the
    seqs of calls that FAILED with their effect unknown. Inputs and results stay in the journal.
    """

    tools: list[str] = Field(default_factory=list)
    seqs: list[int] = Field(default_factory=list)
    tool_of: list[int] = Field(default_factory=list)
    failed: list[int] = Field(default_factory=list)

    @classmethod
    def of(cls, effects: list[Effect]) -> EffectRefs:
        tools: list[str] = []
        index: dict[str, int] = {}
        for effect in effects:
            index.setdefault(effect.tool_name, len(tools))
            if len(index) > len(tools):
                tools.append(effect.tool_name)
        # every field passed explicitly: the Agents SDK's converter leaves out fields not set
        return cls(
            tools=tools,
            seqs=[e.call_seq for e in effects],
            tool_of=[index[e.tool_name] for e in effects],
            failed=[e.call_seq for e in effects if e.failed],
        )

    def effects(self, reversibility: dict[str, Reversibility]) -> list[Effect]:
        failed = set(self.failed)
        return [
            Effect(
                tool_name=self.tools[t],
                call_seq=seq,
                reversibility=reversibility.get(self.tools[t], Reversibility.IRREVERSIBLE),
                failed=seq in failed,
                by_ref=True,
            )
            for seq, t in zip(self.seqs, self.tool_of, strict=True)
        ]


class Original(BaseModel):
    """The unredacted input and result of the effect at ``call_seq``, for its compensation."""

    call_seq: int
    input: dict[str, Any]
    result: Any = None
    #: the result was too big to hand the workflow: the compensation reads it from the journal
    result_in_journal: bool = False


class CompensateRequest(Lean):
    saga_id: str
    seq: int
    prev_hash: str
    tool_name: str
    call_seq: int
    input_json: str
    result: Any = None
    #: the call FAILED with its effect unknown (``result`` is None)
    failed: bool = False
    #: input and result are to be read from the journal rows of ``call_seq``
    by_ref: bool = False
    #: only the result is (the workflow holds no real one: too big, or none to be had)
    result_by_ref: bool = False
    #: this is the saga's last row: seal it as the end, in this state
    seal_as: SagaState | None = None


#: the detail a compensation's permanent failure ends with: the attempt it failed on
_UNDO_ATTEMPT = "sagacity_undo_attempt"


def undo_attempt_detail(attempt: int) -> dict[str, int]:
    """The last detail of a compensation's permanent failure: the attempt that raised it, so the
    workflow journals how many attempts were made (the activity's failure does not say)."""
    return {_UNDO_ATTEMPT: attempt}


def undo_attempt(details: Sequence[Any]) -> int | None:
    """The attempt :func:`undo_attempt_detail` names in a failure's ``details``, if it does."""
    last = details[-1] if details else None
    attempt = last.get(_UNDO_ATTEMPT) if isinstance(last, dict) else None
    return attempt if isinstance(attempt, int) else None


class Compensating(BaseModel):
    """The compensation under way while a saga compensates, and how its attempts went.

    The saga's ``status`` query names the effect; ``attempt`` and ``last_error`` are Temporal's
    (from its description of the workflow, :mod:`sagacity.temporal.undo_attempts`), filled in
    by ``saga status``, the console and the HTTP API.
    """

    tool_name: str
    call_seq: int
    #: the attempt running now, or due next once its backoff has passed
    attempt: int = 1
    #: the previous attempt's error, ``Type: message``; None before any attempt failed
    last_error: str | None = None
    #: when the next attempt starts, while the undo waits out its backoff
    next_attempt_at: datetime | None = None

    @property
    def failed_attempts(self) -> int:
        return self.attempt - 1 if self.last_error is not None else 0
