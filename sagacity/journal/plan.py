"""What rolling a saga back would do, read from its rows alone: what is undone, in which order,
and what stays live.

The saga engine (:mod:`sagacity.temporal.saga`) keeps each call that took effect, or may have,
in the order the calls ran; rolling back, it takes them newest first and compensates each one
whose tool declares a compensation, leaving the others live. Effects already COMPENSATED are not
undone again. :func:`rollback_plan` reads that same list from the journal, so
``sagacity saga abort --dry-run`` can tell it without touching the saga.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from sagacity.journal.calls import Call, read_calls
from sagacity.journal.entry import Entry
from sagacity.journal.phases import APPROVAL_GATE, ROLLBACK, Phase

__all__ = ["Fate", "Planned", "RollbackPlan", "rollback_plan", "rolled_back_by"]


class Fate(StrEnum):
    """What a rollback does with an effect."""

    COMPENSATE = "compensate"
    STAYS_LIVE = "stays_live"


@dataclass(frozen=True, slots=True)
class Planned:
    """One call a rollback reaches; ``check`` says why a human must look at it (None: no need)."""

    call: Call
    fate: Fate
    check: str | None = None


@dataclass
class RollbackPlan:
    """Every call a rollback reaches, newest first (the order compensations run in)."""

    steps: list[Planned] = field(default_factory=list)
    #: calls already compensated: nothing more to do for them
    compensated: list[Call] = field(default_factory=list)
    #: the AWAITING_APPROVAL row of a call nobody has decided yet: rolled back, it never runs
    awaiting_approval: Entry | None = None

    @property
    def compensate(self) -> list[Planned]:
        return [s for s in self.steps if s.fate is Fate.COMPENSATE]

    @property
    def live(self) -> list[Planned]:
        return [s for s in self.steps if s.fate is Fate.STAYS_LIVE]


def rollback_plan(rows: Iterable[Entry], compensable: Mapping[str, bool]) -> RollbackPlan:
    """What rolling back the saga whose rows these are would do, as its engine decides it.

    ``compensable``: whether each tool declares a compensation, as the saga's worker knows its
    tools; a tool it does not know stays live, as it does in the saga. A call with no outcome
    yet (running, or SUSPECT) is the newest effect when it took one, so it comes first.
    """
    rows = list(rows)
    plan = RollbackPlan()
    for call in reversed(read_calls(rows)):
        tool = call.intent.tool_name
        undo = Fate.COMPENSATE if compensable.get(tool, False) else Fate.STAYS_LIVE
        if call.outcome is None:
            plan.steps.append(
                Planned(
                    call,
                    undo,
                    "no outcome journaled: still running, or SUSPECT (a worker died mid-call); "
                    + (
                        "compensated if it took effect"
                        if undo is Fate.COMPENSATE
                        else "if it took effect, nothing undoes it"
                    ),
                )
            )
        elif call.undone is Phase.COMPENSATED or not call.may_have_taken_effect:
            if call.undone is Phase.COMPENSATED:
                plan.compensated.append(call)
        elif call.undone is Phase.COMPENSATION_FAILED:
            plan.steps.append(
                Planned(call, Fate.STAYS_LIVE, "its compensation failed: the effect is live")
            )
        elif call.outcome.phase is Phase.FAILED:
            plan.steps.append(
                Planned(
                    call,
                    undo,
                    "failed, and may have taken effect"
                    + ("" if undo is Fate.COMPENSATE else ": nothing undoes it"),
                )
            )
        else:
            plan.steps.append(Planned(call, undo))
    for row in rows:
        if row.phase is Phase.AWAITING_APPROVAL:
            plan.awaiting_approval = row
        elif row.phase in (Phase.APPROVED, Phase.REJECTED) and row.tool_name == APPROVAL_GATE:
            plan.awaiting_approval = None
    return plan


def rolled_back_by(rows: Iterable[Entry]) -> str | None:
    """Who rolled the ended saga back (``sagacity saga rollback``), as its row says; None when
    nobody did."""
    for row in rows:
        if row.tool_name == ROLLBACK:
            try:
                body = json.loads(row.payload)
            except ValueError:
                return "?"
            return str(body.get("by", "?")) if isinstance(body, dict) else "?"
    return None
