"""Reconcile the journal with the world: ask each call's probe whether its effect exists.

The journal claims, call by call, what should be out there: an EXECUTED call that was not
compensated should exist (and so should one whose compensation failed); a COMPENSATED call, or
one that FAILED without effect, should be gone; a COMPENSATABLE call that was corrected (not
restored) claims neither: the probe's answer is reported beside the correction. A tool's probe (``@tool.probe``) looks in the
system the tool acts on; where the answer differs from the claim, that is drift. A call with no
outcome (SUSPECT, or still running) claims nothing: the probe's answer is what a resolution can
say. A call whose journaled input or result is redacted is not probed: the probe would be given
markers, not the values the call used, and its answer would be a guess.

Whatever the probes say, a saga whose workflow closed unfinished (terminated, timed out) names
each effect it left live (``left_live``): nothing will undo those but ``sagacity saga rollback``.
"""

from __future__ import annotations

import asyncio
import inspect
import json
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from sagacity.evidence.certify import Finding, Kind, RunLookup, effect_findings
from sagacity.evidence.redaction import hidden_paths
from sagacity.journal import Call, Phase, read_calls, read_result
from sagacity.store.journal import JournalStore
from sagacity.tools import Found, Probe, ProbeContext, ToolRegistry

__all__ = ["Check", "Reconciliation", "Verdict", "reconcile"]

#: how long one probe may take before it counts as failed
PROBE_TIMEOUT_S = 30.0


class Verdict(StrEnum):
    """What comparing one call's journal claim with its probe found."""

    #: the probe agrees with the journal
    OK = "ok"
    #: the probe contradicts the journal: an effect gone behind its back, or one still there
    DRIFT = "drift"
    #: the call has no outcome: the probe says whether it happened
    SUSPECT = "suspect"
    #: a SUSPECT call the saga took a resolution for, from the probe's answer
    RESOLVED = "resolved"
    #: the call FAILED with its effect unknown and was never undone: the probe says what is there
    UNKNOWN = "unknown"
    #: a COMPENSATABLE effect corrected, not restored: the original may still show, so the
    #: probe's answer is reported, not judged
    CORRECTED = "corrected"
    #: not probed: the journal hides part of the call's input or result, or never held it
    REDACTED = "redacted"
    #: the probe raised, timed out or answered something other than a bool or Found
    PROBE_FAILED = "probe_failed"


#: verdicts a person must look at (or ``--resolve-suspects`` settle)
NEEDS_A_PERSON = frozenset({Verdict.DRIFT, Verdict.SUSPECT, Verdict.PROBE_FAILED})


@dataclass
class Check:
    """One probed call: the journal's claim, the probe's answer and the verdict."""

    saga_id: str
    seq: int
    tool_name: str
    #: the call as the journal tells it (``EXECUTED``, ``COMPENSATED``, ``no outcome``, …)
    journal: str
    #: whether the journal says the effect should exist; None when it cannot say
    expected: bool | None
    #: the probe's answer; None when there is none
    exists: bool | None
    verdict: Verdict
    detail: str
    #: what the probe found, for a resolution that says the call happened
    found: Any = None

    def to_dict(self) -> dict[str, object]:
        return {
            "saga_id": self.saga_id,
            "seq": self.seq,
            "tool": self.tool_name,
            "journal": self.journal,
            "expected": self.expected,
            "exists": self.exists,
            "verdict": self.verdict.value,
            "detail": self.detail,
        }


@dataclass
class Reconciliation:
    """One saga's probed calls, and how many calls of tools without a probe it has."""

    saga_id: str
    checks: list[Check] = field(default_factory=list)
    unprobed: int = 0
    #: effects left live by the saga's workflow closing unfinished
    left_live: list[Finding] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.left_live and not any(c.verdict in NEEDS_A_PERSON for c in self.checks)

    def to_dict(self) -> dict[str, object]:
        return {
            "saga_id": self.saga_id,
            "reconciled": self.clean,
            "unprobed": self.unprobed,
            "calls": [c.to_dict() for c in self.checks],
            "left_live": [f.to_dict() for f in self.left_live],
        }


async def reconcile(
    journal: JournalStore,
    tools: ToolRegistry,
    saga_ids: Sequence[str],
    runs: RunLookup | None = None,
) -> AsyncIterator[Reconciliation]:
    """Each saga's calls, probed where their tool has a probe, in journal order; with ``runs``
    (where to read how each saga's run chain stands), what one that closed unfinished left live."""
    chains = await journal.chains(saga_ids) if runs is not None else {}
    for saga_id in saga_ids:
        found = Reconciliation(saga_id)
        rows = await journal.read(saga_id)
        chain = chains.get(saga_id)
        run = None if chain is None or runs is None else await runs.run(*chain)
        if run is not None and run.unfinished:
            found.left_live = [
                f for f in effect_findings(saga_id, rows, run) if f.kind is Kind.LIVE_EFFECT
            ]
        for call in read_calls(rows):
            tool = call.intent.tool_name
            probe = tools.get(tool).probe if tool in tools else None
            if probe is None:
                found.unprobed += 1
            else:
                found.checks.append(await _check(saga_id, call, probe))
        yield found


def _claim(call: Call) -> tuple[str, bool | None]:
    """How the journal tells the call, and whether its effect should exist (None: unknown)."""
    outcome, undone = call.outcome, call.undone
    if outcome is None:
        return "no outcome", None
    told = outcome.phase.value if undone is None else f"{outcome.phase.value}, {undone.value}"
    if call.correction is not None:
        return f"{told} ({call.correction.describe()})", None
    live = call.live
    if live is None:  # compensated, or failed without effect
        return (told if undone is Phase.COMPENSATED else f"{told} (no effect)"), False
    if live == "executed":
        return told, True  # never undone, or its undo failed
    return f"{told} (effect unknown)", None


async def _check(saga_id: str, call: Call, probe: Probe) -> Check:
    journal, expected = _claim(call)
    seq, tool = call.intent.seq, call.intent.tool_name
    executed = call.outcome is not None and call.outcome.phase is Phase.EXECUTED
    payload = call.outcome.payload if executed and call.outcome is not None else ""

    def check(verdict: Verdict, detail: str, exists: bool | None = None) -> Check:
        return Check(saga_id, seq, tool, journal, expected, exists, verdict, detail)

    hidden = [*hidden_paths(call.intent.input), *(f"result{p}" for p in hidden_paths(payload))]
    if hidden:
        return check(
            Verdict.REDACTED,
            f"cannot probe (redacted): the journal hides {', '.join(hidden)}, so the probe "
            "would not see what the call used",
        )
    returned = read_result(payload)
    if not returned.available:
        # never journaled as the tool returned it: the probe would be given a stand-in
        return check(Verdict.REDACTED, f"cannot probe: {returned.missing}")
    try:
        args = json.loads(call.intent.input or "{}")
        ctx = ProbeContext(saga_id, seq, tool, args, returned.value)
    except ValueError as exc:
        return check(Verdict.PROBE_FAILED, f"the journaled call is not JSON: {exc}")
    try:
        answer = probe(ctx)
        if inspect.isawaitable(answer):
            answer = await asyncio.wait_for(answer, PROBE_TIMEOUT_S)
    except TimeoutError:
        return check(Verdict.PROBE_FAILED, f"the probe took longer than {PROBE_TIMEOUT_S:g} s")
    except Exception as exc:  # the user's probe: any failure is its answer
        return check(Verdict.PROBE_FAILED, f"the probe raised {type(exc).__name__}: {exc}")
    if not isinstance(answer, bool | Found):
        return check(Verdict.PROBE_FAILED, f"the probe returned {answer!r}, not a bool or Found")
    exists = answer is not False
    there = "the effect exists" if exists else "the effect is gone"
    if call.outcome is None:
        result = check(
            Verdict.SUSPECT, f"no outcome journaled (SUSPECT, or still running); {there}", exists
        )
        result.found = answer.result if isinstance(answer, Found) else None
        return result
    if call.correction is not None:
        return check(Verdict.CORRECTED, f"corrected, not restored: {there}", exists)
    if expected is None:
        return check(Verdict.UNKNOWN, f"{journal}: {there}", exists)
    if exists == expected:
        return check(Verdict.OK, there, exists)
    why = (
        f"{journal} and never compensated, but the effect is gone"
        if expected
        else f"{journal}, but the effect still exists"
    )
    return check(Verdict.DRIFT, why, exists)
