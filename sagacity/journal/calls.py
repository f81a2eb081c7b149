"""Tool calls as a saga's rows tell them: each INTENT, its outcome, and the compensations of it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from sagacity.journal.corrections import Correction, read_correction
from sagacity.journal.entry import Entry
from sagacity.journal.phases import APPROVAL_GATE, SUPERSEDED, Phase

__all__ = ["Call", "Liveness", "read_calls", "rolled_back"]

#: how a call's effect stands: it took effect, it may have, or it is running (no outcome yet)
Liveness = Literal["executed", "effect_unknown", "in_flight"]


@dataclass
class Call:
    """One call: its INTENT row, its EXECUTED or FAILED row (None: unknown), and the
    COMPENSATED / COMPENSATION_FAILED rows that name it, in journal order."""

    intent: Entry
    outcome: Entry | None = None
    undo: list[Entry] = field(default_factory=list)

    @property
    def undone(self) -> Phase | None:
        """The last compensation's phase; None while none was journaled."""
        return self.undo[-1].phase if self.undo else None

    @property
    def correction(self) -> Correction | None:
        """How a COMPENSATABLE undo corrected the effect; None unless the last undo corrected it."""
        if self.undone is not Phase.COMPENSATED:
            return None
        return read_correction(self.undo[-1].payload)

    @property
    def may_have_taken_effect(self) -> bool:
        """EXECUTED, or FAILED without saying it took no effect (``"effect": "none"``): what a
        rollback must undo. False while the call has no outcome."""
        if self.outcome is None:
            return False
        if self.outcome.phase is Phase.EXECUTED:
            return True
        try:
            body = json.loads(self.outcome.payload)
        except ValueError:
            return True  # a FAILED row whose payload cannot be read says nothing of the effect
        return not (isinstance(body, dict) and body.get("effect") == "none")

    @property
    def live(self) -> Liveness | None:
        """Whether the call's effect may still be in the world; None: it is not (it failed
        without effect, or its compensation ran)."""
        if self.undone is Phase.COMPENSATED:
            return None
        if self.outcome is None:
            return "in_flight"
        if not self.may_have_taken_effect:
            return None
        return "executed" if self.outcome.phase is Phase.EXECUTED else "effect_unknown"


def read_calls(rows: Iterable[Entry]) -> list[Call]:
    """The calls of a saga's rows, in order.

    A compensation row names its call by tool and input, as the saga engine writes it: the
    newest such call that has an outcome and is not compensated yet (a retried compensation
    follows the one that failed).
    """
    calls: list[Call] = []
    open_call: Call | None = None
    for row in rows:
        if row.phase is Phase.INTENT:
            open_call = Call(row)
            calls.append(open_call)
        elif row.phase in (Phase.EXECUTED, Phase.FAILED):
            if open_call is not None and open_call.intent.tool_name == row.tool_name:
                open_call.outcome = row
            open_call = None
        elif row.phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED):
            named = next(
                (
                    c
                    for c in reversed(calls)
                    if c.outcome is not None
                    and c.intent.tool_name == row.tool_name
                    and c.intent.input == row.input
                    and c.undone is not Phase.COMPENSATED
                ),
                None,
            )
            if named is not None:
                named.undo.append(row)
    return calls


def rolled_back(rows: Iterable[Entry]) -> bool:
    """Whether the saga's last run rolled back: a rejection, a rollback or a compensation comes
    after its newest INTENT.

    Read by run, not by row: a run a reset superseded may have rejected or compensated before
    the run that replaced it made its calls and completed; and the rejection the engine writes
    for a request whose run ended (:data:`SUPERSEDED`) decides nothing.
    """
    found = False
    for row in rows:
        if row.phase is Phase.INTENT:
            found = False
        elif row.phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED) or (
            row.phase is Phase.REJECTED and not _superseded(row)
        ):
            found = True
    return found


def _superseded(row: Entry) -> bool:
    if row.tool_name != APPROVAL_GATE:
        return False
    try:
        body = json.loads(row.payload)
    except ValueError:
        return False
    if not isinstance(body, dict) or body.get("by") != "sagacity":
        return False
    reason = body.get("reason")
    return isinstance(reason, str) and reason.startswith(SUPERSEDED)
