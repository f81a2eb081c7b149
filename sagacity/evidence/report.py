"""What verifying one saga found: its chain's verdict and whether each anchor agrees with it.

Pure: the comparisons are generators that yield the seqs whose stored hash they need and are sent
the hash back (``None``: no such row), so the same code checks a live database (asking Postgres)
and an offline bundle (looking in the rows it streamed).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from sagacity.evidence.checkpoints import Checkpoint, CheckpointLog, Kind
from sagacity.evidence.decisions import DecisionCheck
from sagacity.journal import Verdict

__all__ = [
    "Agreement",
    "Anchor",
    "AnchorCheck",
    "Probe",
    "ReportWarning",
    "SagaReport",
    "Source",
    "checkpoint_probe",
    "compare",
    "decision_checks",
    "decision_notes",
    "saga_report",
    "settle",
    "settle_async",
]

# Invalid checkpoint lines listed one by one before the rest are counted.
_LISTED_PROBLEMS = 5
# Seqs after a saga's end named one by one before the rest are given as a range.
_LISTED_SEQS = 10


class Source(StrEnum):
    """Who vouches for (or against) a saga's journal."""

    CHAIN = "chain"  # the rows' own hash chain
    CHECKPOINT = "checkpoint"  # signed checkpoints outside the database
    TEMPORAL = "temporal"  # the saga workflow's own record of its head
    MANIFEST = "manifest"  # an export bundle's manifest
    DECISION = "decision"  # the signatures of the approvers' decisions
    LOG = "log"  # the transparency log: its leaves under its signed tree heads


class Agreement(StrEnum):
    AGREES = "agrees"
    DISAGREES = "disagrees"
    MISSING = "missing"  # the source has no record of this saga
    INVALID = "invalid"  # the source's record is damaged or forged
    UNAVAILABLE = "unavailable"  # the source could not be asked


@dataclass(frozen=True, slots=True)
class Anchor:
    """A head recorded by a witness other than the journal table: row ``seq`` hashed ``hash``."""

    seq: int
    hash: str
    #: how the witness recorded it, for reports ("signed 2026-…", "workflow result")
    note: str = ""
    #: set when the saga ended at this head, saying how the witness knows ("sealed at seq 8
    #: (completed)"); then no row may follow it
    ended: str = ""


@dataclass(frozen=True, slots=True)
class AnchorCheck:
    """One source's finding. ``fatal`` ones make the saga fail verification."""

    source: Source
    agreement: Agreement
    detail: str
    seq: int | None = None
    fatal: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.value,
            "agreement": self.agreement.value,
            "seq": self.seq,
            "fatal": self.fatal,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class ReportWarning:
    """A finding that does not fail verification. ``kind``: ``dangling_intent``, ``unsealed``,
    ``unverified_decision``."""

    kind: str
    seq: int
    detail: str

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "seq": self.seq, "detail": self.detail}


@dataclass(frozen=True, slots=True)
class SagaReport:
    """A saga's chain verdict and every anchor's finding."""

    saga_id: str
    verdict: Verdict
    checks: tuple[AnchorCheck, ...] = ()
    #: what the anchors found that needs a look without failing (an end with no seal)
    notes: tuple[ReportWarning, ...] = ()

    @property
    def ok(self) -> bool:
        return self.verdict.ok and not any(c.fatal for c in self.checks)

    def faults(self) -> list[AnchorCheck]:
        """What fails, the chain's own fault first."""
        found = [c for c in self.checks if c.fatal]
        problem = self.verdict.problem
        if problem is not None:
            detail = f"{problem.fault.value}: {problem.detail}"
            found.insert(
                0, AnchorCheck(Source.CHAIN, Agreement.DISAGREES, detail, problem.seq, True)
            )
        return found

    def warnings(self) -> list[ReportWarning]:
        """What needs a look without failing: calls whose outcome is unknown, the anchors' notes."""
        return [
            ReportWarning(
                "dangling_intent",
                d.seq,
                f"INTENT of {d.tool_name!r} has no EXECUTED or FAILED after it: the call's "
                "outcome is unknown (SUSPECT until a human resolves it, or still running)",
            )
            for d in self.verdict.dangling
        ] + list(self.notes)

    def to_dict(self) -> dict[str, Any]:
        problem = self.verdict.problem
        return {
            "saga_id": self.saga_id,
            "ok": self.ok,
            "rows": self.verdict.rows,
            "head_seq": self.verdict.head_seq,
            "head_hash": self.verdict.head_hash,
            "problem": None
            if problem is None
            else {"seq": problem.seq, "fault": problem.fault.value, "detail": problem.detail},
            "anchors": [c.to_dict() for c in self.checks],
            "warnings": [w.to_dict() for w in self.warnings()],
        }


def decision_checks(decisions: DecisionCheck) -> list[AnchorCheck]:
    """A saga's decisions as report findings: each one that fails (a bad signature, a decision
    not bound to its request or to the call that ran) fatal, else one that agrees."""
    decisions.finish()
    found = [
        AnchorCheck(Source.DECISION, Agreement.DISAGREES, why, seq, fatal=True)
        for seq, why in decisions.problems
    ]
    if not found and decisions.checked:
        detail = f"{decisions.checked} signed decision(s) verify with the keyring"
        found.append(AnchorCheck(Source.DECISION, Agreement.AGREES, detail))
    return found


def decision_notes(decisions: DecisionCheck) -> list[ReportWarning]:
    """A saga's decisions nothing proves (an unsigned abort or halt), as warnings."""
    decisions.finish()
    return [ReportWarning("unverified_decision", seq, why) for seq, why in decisions.unverified]


def saga_report(
    verdict: Verdict, checks: Sequence[AnchorCheck], notes: Sequence[ReportWarning] = ()
) -> SagaReport:
    """The report, adding a fault when nothing at all is known of the saga."""
    known = any(c.agreement is Agreement.AGREES or c.fatal for c in checks)
    if verdict.rows == 0 and not known:
        missing = AnchorCheck(
            Source.CHAIN, Agreement.MISSING, "the journal has no rows for this saga", fatal=True
        )
        checks = [missing, *checks]
    return SagaReport(verdict.saga_id, verdict, tuple(checks), tuple(notes))


#: A comparison in progress: yields a seq, is sent that row's stored hash, returns its findings.
Probe = Generator[int, "str | None", list[AnchorCheck]]


def compare(source: Source, anchors: Sequence[Anchor], verdict: Verdict, witness: str) -> Probe:
    """Check ``anchors`` (ascending seq) against the journal's stored hashes.

    The latest anchor decides. When it disagrees, a binary search over the earlier ones finds
    the last that still agrees, which bounds where the journal was changed. When it agrees and
    says the saga ``ended`` there, any row after it is a fault too.
    """
    known: dict[int, str | None] = {}

    def stored(seq: int) -> Generator[int, str | None, str | None]:
        if seq not in known:
            if verdict.rows and seq == verdict.head_seq:
                known[seq] = verdict.head_hash
            elif verdict.ok and seq > verdict.head_seq:
                known[seq] = None  # every row was read and verified: there is no such row
            else:
                known[seq] = yield seq
        return known[seq]

    latest = anchors[-1]
    if (yield from stored(latest.seq)) == latest.hash:
        more = f", {len(anchors)} checkpoints" if len(anchors) > 1 else ""
        detail = f"at seq {latest.seq} ({latest.note}{more})"
        agrees = AnchorCheck(source, Agreement.AGREES, detail, latest.seq)
        if not latest.ended:
            return [agrees]
        # past a chain fault the rows were not all read: ask whether the end has a successor
        follows = not verdict.ok and (yield from stored(latest.seq + 1)) is not None
        after = _after_end(source, latest, verdict, follows)
        return [agrees] if after is None else [after, agrees]
    low, high = 0, len(anchors) - 1  # anchors[high] disagrees
    while low < high:
        mid = (low + high) // 2
        if (yield from stored(anchors[mid].seq)) == anchors[mid].hash:
            low = mid + 1
        else:
            high = mid
    bad = anchors[high]
    held = known[bad.seq]
    if held is None:
        detail = f"{witness} ({bad.note}) has row {bad.seq} hashed {bad.hash[:12]}…, but the journal has no row {bad.seq}"
        if verdict.ok and verdict.rows == 0:
            detail += " (it has no rows of this saga): the saga was deleted"
        elif verdict.ok:
            detail += f" (it ends at seq {verdict.head_seq}): rows were removed"
    else:
        detail = (
            f"row {bad.seq} is hashed {held[:12]}… in the journal but {bad.hash[:12]}… by "
            f"{witness} ({bad.note}): the journal was rewritten"
        )
    if high > 0:
        detail += f"; it still agrees at seq {anchors[high - 1].seq}"
    return [AnchorCheck(source, Agreement.DISAGREES, detail, bad.seq, fatal=True)]


def _after_end(source: Source, end: Anchor, verdict: Verdict, follows: bool) -> AnchorCheck | None:
    """The rows the journal holds after the head a saga ended at, as a fault; None if none.

    The rows that verified are known; past a chain fault, the faulty row and the end's
    successor (``follows``: it exists) are the ones known.
    """
    found = set(range(end.seq + 1, verdict.head_seq + 1))
    problem = verdict.problem
    if problem is not None and problem.seq > end.seq:
        found.add(problem.seq)
    if follows:
        found.add(end.seq + 1)
    if not found:
        return None
    seqs = sorted(found)
    if len(seqs) > _LISTED_SEQS:
        listed = seqs[: _LISTED_SEQS - 1]
        named = f"rows {', '.join(map(str, listed))}, …, {seqs[-1]} ({len(seqs)} rows) were"
    elif len(seqs) > 1:
        named = f"rows {', '.join(map(str, seqs))} were"
    else:
        named = f"row {seqs[0]} was"
    detail = f"{named} written after the saga ended: {end.ended}"
    if problem is not None:
        detail += f"; the chain breaks at seq {problem.seq}, so later rows were not all read"
    return AnchorCheck(source, Agreement.DISAGREES, detail, seqs[0], fatal=True)


def checkpoint_probe(log: CheckpointLog, verdict: Verdict) -> Probe:
    """Compare a saga's checkpoint log with its journal; bad lines and a missing log are faults.

    The latest signed head decides (a seal in force, if any: then no row may follow it); only
    when it disagrees are the other checkpoints verified, to locate the change.
    """
    latest = log.latest()
    checks: list[AnchorCheck] = []
    if latest is None:
        if not log.problems:
            detail = (
                "no signed checkpoint of this saga: its rows were not written by a worker that "
                "checkpoints (forged, or older than checkpointing)"
            )
            checks.append(
                AnchorCheck(Source.CHECKPOINT, Agreement.MISSING, detail, fatal=verdict.rows > 0)
            )
    elif latest.kind is Kind.PURGED and verdict.rows == 0:
        detail = (
            f"purged by retention at {latest.at}, head seq {latest.seq}, "
            f"exported in bundle {latest.bundle}"
        )
        checks.append(AnchorCheck(Source.CHECKPOINT, Agreement.AGREES, detail, latest.seq))
    elif latest.seq:
        top = log.seal() or latest
        found = yield from compare(Source.CHECKPOINT, [_anchor(top)], verdict, "the checkpoint")
        if found[-1].agreement is not Agreement.AGREES:
            anchors = [_anchor(cp) for cp in log.verified() if cp.seq]
            found = yield from compare(Source.CHECKPOINT, anchors, verdict, "the checkpoint")
        checks += found
    invalid = [
        AnchorCheck(Source.CHECKPOINT, Agreement.INVALID, problem, fatal=True)
        for problem in log.problems[:_LISTED_PROBLEMS]
    ]
    if len(log.problems) > _LISTED_PROBLEMS:
        more = f"{len(log.problems) - _LISTED_PROBLEMS} more invalid checkpoint lines"
        invalid.append(AnchorCheck(Source.CHECKPOINT, Agreement.INVALID, more, fatal=True))
    return invalid + checks


def _anchor(cp: Checkpoint) -> Anchor:
    if cp.kind is Kind.SEALED:
        ended = f"sealed at seq {cp.seq} ({cp.state}, signed {cp.at})"
        return Anchor(cp.seq, cp.hash, f"sealed {cp.at}, {cp.state}", ended)
    return Anchor(cp.seq, cp.hash, f"signed {cp.at}")


def settle(probe: Probe, lookup: Callable[[int], str | None]) -> list[AnchorCheck]:
    """Run ``probe`` to the end, answering each seq with ``lookup``."""
    try:
        seq = next(probe)
        while True:
            seq = probe.send(lookup(seq))
    except StopIteration as done:
        result: list[AnchorCheck] = done.value
        return result


async def settle_async(
    probe: Probe, lookup: Callable[[int], Awaitable[str | None]]
) -> list[AnchorCheck]:
    """:func:`settle` with a lookup that waits (a database query)."""
    try:
        seq = next(probe)
        while True:
            seq = probe.send(await lookup(seq))
    except StopIteration as done:
        result: list[AnchorCheck] = done.value
        return result
