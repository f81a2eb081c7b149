"""What a rollback proof found: one verdict per case, and the table of a run's proofs."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = ["CaseVerdict", "ProofReport", "RollbackCase", "RollbackNotProven", "proof_table"]


class RollbackCase(StrEnum):
    """One way a call can end that its undo must cope with, as the prover stages it."""

    #: the call succeeds and the saga rolls back: the undo gets the result and must restore the
    #: state the probe saw before the call (and the probe must see the call's effect)
    RESTORES_STATE = "restores_state"
    #: the call raises before the tool runs: the undo gets ``ctx.failed`` and no result, and
    #: must leave the world as it was (there is nothing to undo)
    FAILED_BEFORE_EFFECT = "failed_before_effect"
    #: the tool takes effect, then the call raises: the undo gets ``ctx.failed`` and no result,
    #: and must find the effect from the call itself (``ctx.saga_id``, ``ctx.seq``)
    FAILED_AFTER_EFFECT = "failed_after_effect"
    #: the tool takes effect and the worker dies before EXECUTED is journaled: the retry finds
    #: the call SUSPECT (an idempotent tool runs again instead); the saga is aborted, the call
    #: journaled FAILED with its effect unknown, and the undo must cope with no result
    WORKER_KILLED_AFTER_EFFECT = "worker_killed_after_effect"
    #: the undo runs, its acknowledgement is lost, and the engine runs it again: the second run
    #: must change nothing
    UNDO_TWICE = "undo_twice"
    #: an IRREVERSIBLE tool: the call waits for a human's approval, and nothing runs before it
    IRREVERSIBLE_WAITS = "irreversible_waits"


@dataclass(frozen=True, slots=True)
class CaseVerdict:
    """How one case went: ``ok`` True (proven), False (``detail`` says what broke) or None
    (the case does not apply to the tool; ``detail`` says why)."""

    case: RollbackCase
    ok: bool | None
    detail: str = "ok"
    #: the saga the case ran as (its journal shows what happened)
    saga_id: str | None = None

    @property
    def mark(self) -> str:
        return {True: "ok", False: "BROKEN", None: "-"}[self.ok]


@dataclass(frozen=True, slots=True)
class ProofReport:
    """Every case the prover ran for one tool."""

    tool: str
    verdicts: tuple[CaseVerdict, ...]

    @property
    def ok(self) -> bool:
        """Whether no case broke (cases that do not apply count as proven)."""
        return all(v.ok is not False for v in self.verdicts)

    @property
    def broken(self) -> list[CaseVerdict]:
        return [v for v in self.verdicts if v.ok is False]

    def verdict(self, case: RollbackCase) -> CaseVerdict:
        """The verdict of ``case``; ``KeyError`` when the prover did not run it."""
        for verdict in self.verdicts:
            if verdict.case is case:
                return verdict
        raise KeyError(case)

    def describe(self) -> str:
        """One line per case: ``tool / case: ok`` or what broke."""
        return "\n".join(f"{self.tool} / {v.case.value}: {v.detail}" for v in self.verdicts)

    def assert_ok(self) -> None:
        """Raise :class:`RollbackNotProven`, listing what broke, unless every case is proven."""
        if not self.ok:
            lines = [f"  {v.case.value}: {v.detail} (saga {v.saga_id})" for v in self.broken]
            raise RollbackNotProven(
                f"the undo of {self.tool!r} is not proven:\n" + "\n".join(lines)
            )


class RollbackNotProven(AssertionError):
    """A tool's undo broke in at least one case: the message lists each and what broke."""


def proof_table(reports: Iterable[ProofReport]) -> str:
    """The run's proofs as one table (tool by case: ok / BROKEN / -), with what broke below."""
    reports = list(reports)
    cases = [c for c in RollbackCase if any(_has(r, c) for r in reports)]
    header = ["tool", *(c.value for c in cases)]
    rows = [[r.tool, *(r.verdict(c).mark if _has(r, c) else "" for c in cases)] for r in reports]
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
    notes = [f"{r.tool} / {v.case.value}: {v.detail}" for r in reports for v in r.broken]
    return "\n".join(lines + (["", *notes] if notes else []))


def _has(report: ProofReport, case: RollbackCase) -> bool:
    return any(v.case is case for v in report.verdicts)
