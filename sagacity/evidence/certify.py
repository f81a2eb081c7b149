"""Certify sagas for CI: whatever a human must still look at, saga by saga, with the seq.

A saga is certified when nothing about it needs a person: no effect left live after it rolled
back or after its workflow closed unfinished (terminated, timed out), no compensation that
failed for good, no call whose outcome is unknown, no approval waiting past its SLA, its journal
verifies against every anchor configured (chain, checkpoints, decision signatures), and its
workflow task does not keep failing (:func:`task_finding`, from Temporal). Each finding names its
kind, the saga and the seq;
:func:`junit_xml` writes them as JUnit XML, one test case per saga.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Protocol
from xml.etree import ElementTree

from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.decisions import Keyring
from sagacity.journal import Correction, Entry, Phase, read_calls, rolled_back
from sagacity.store.approvals import ApprovalStore, InboxFilter
from sagacity.store.journal import JournalStore

__all__ = [
    "Certificate",
    "Corrected",
    "Finding",
    "Kind",
    "RunLookup",
    "RunState",
    "certify",
    "corrections",
    "effect_findings",
    "junit_xml",
    "task_finding",
]


class RunState(Protocol):
    """How a saga's run chain stands in Temporal (``sagacity.temporal.runs.ChainRun``): read here
    without the Temporal glue, which the evidence layer stands apart from."""

    @property
    def unfinished(self) -> bool:
        """The newest run closed, and not by completing (terminated, timed out, ...)."""

    @property
    def completed(self) -> bool:
        """The newest run completed, and the saga showed it completed."""

    @property
    def how(self) -> str:
        """The run's status in words."""


class RunLookup(Protocol):
    """Where each saga's run chain is read (``sagacity.temporal.runs.RunChains``)."""

    async def run(self, workflow_id: str, first_run_id: str) -> RunState | None:
        """The newest run of the chain that began with ``first_run_id``; None when unknown."""


#: approvals read per page while looking for overdue ones
_PAGE = 500


class Kind(StrEnum):
    """What a finding is about."""

    #: an effect still live after the saga rolled back (an irreversible one, or one whose
    #: compensation never ran) or after its workflow closed unfinished, or a failed call that
    #: may have taken effect
    LIVE_EFFECT = "live_effect"
    #: a compensation that failed and was never retried to success
    COMPENSATION_FAILED = "compensation_failed"
    #: an INTENT with no outcome: the call may or may not have happened (SUSPECT)
    UNKNOWN_OUTCOME = "unknown_outcome"
    #: a call waiting for a decision longer than the SLA, or past its deadline
    APPROVAL_OVERDUE = "approval_overdue"
    #: the chain does not verify, or an anchor (checkpoint, seal, signature) disagrees
    EVIDENCE = "evidence"
    #: the saga's workflow task keeps failing: it cannot move on, abort or compensate
    WORKFLOW_TASK_FAILING = "workflow_task_failing"


@dataclass(frozen=True, slots=True)
class Finding:
    kind: Kind
    saga_id: str
    seq: int | None
    detail: str

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind.value,
            "saga_id": self.saga_id,
            "seq": self.seq,
            "detail": self.detail,
        }


@dataclass(frozen=True, slots=True)
class Corrected:
    """A COMPENSATABLE effect the saga corrected rather than restored: no finding (its undo ran),
    but said, with what the correction returned, for the person reading the certificate."""

    saga_id: str
    seq: int
    tool_name: str
    correction: Correction

    @property
    def detail(self) -> str:
        return f"{self.tool_name} (call seq {self.seq}) {self.correction.describe()}"

    def to_dict(self) -> dict[str, object]:
        return {"seq": self.seq, "tool": self.tool_name, "correction": self.correction.result}


@dataclass
class Certificate:
    """One saga's findings; certified when there are none. ``corrected``: effects its undo
    corrected, not restored (no finding)."""

    saga_id: str
    rows: int
    findings: list[Finding] = field(default_factory=list)
    corrected: list[Corrected] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.findings


def effect_findings(
    saga_id: str, rows: Sequence[Entry], run: RunState | None = None
) -> list[Finding]:
    """Live effects and failed compensations, read from a saga's rows and its run chain.

    A call that took effect, or may have, must have been compensated when the saga's last run
    rolled back (:func:`~sagacity.journal.rolled_back`; not when the run showed it completed),
    or when its run chain ``run`` closed without finishing (terminated, timed out, failed or
    cancelled around the engine): nothing will undo it then but ``sagacity saga rollback``.
    ``run`` None: the rows alone judge.
    """
    unfinished = run is not None and run.unfinished
    completed = run is not None and run.completed
    rollback = unfinished or (not completed and rolled_back(rows))
    found = []
    for call in read_calls(rows):
        outcome, tool, seq = call.outcome, call.intent.tool_name, call.intent.seq
        if outcome is None or not call.may_have_taken_effect:
            continue  # no outcome is reported as such; a call that failed without effect is done
        if call.undone is Phase.COMPENSATION_FAILED:
            found.append(
                Finding(
                    Kind.COMPENSATION_FAILED,
                    saga_id,
                    call.undo[-1].seq,
                    f"the compensation of {tool} (INTENT seq {seq}) failed and never ran to "
                    "success: its effect is live",
                )
            )
        elif call.undone is None and rollback:
            what = (
                "took effect"
                if outcome.phase is Phase.EXECUTED
                else "failed and may have taken effect"
            )
            why = (
                f"its workflow was {run.how} before the saga ended (undo it with "
                f"`sagacity saga rollback {saga_id}`)"
                if unfinished and run is not None
                else "though the saga rolled back"
            )
            found.append(
                Finding(
                    Kind.LIVE_EFFECT,
                    saga_id,
                    seq,
                    f"{tool} (call seq {seq}) {what} and was never compensated, {why}",
                )
            )
    return found


def corrections(saga_id: str, rows: Sequence[Entry]) -> list[Corrected]:
    """The saga's calls whose last undo corrected the effect (COMPENSATABLE), in journal order."""
    found = []
    for call in read_calls(rows):
        correction = call.correction
        if correction is not None:
            found.append(Corrected(saga_id, call.intent.seq, call.intent.tool_name, correction))
    return found


def task_finding(saga_id: str, why: str) -> Finding:
    """A saga whose workflow task keeps failing, and why (Temporal tells it), as a finding."""
    return Finding(Kind.WORKFLOW_TASK_FAILING, saga_id, None, why)


async def certify(
    journal: JournalStore,
    approvals: ApprovalStore,
    *,
    saga_ids: Sequence[str] | None = None,
    since: datetime | None = None,
    approval_sla: timedelta = timedelta(hours=24),
    checkpoints: CheckpointDir | None = None,
    keyring: Keyring | None = None,
    runs: RunLookup | None = None,
    now: datetime | None = None,
) -> AsyncIterator[Certificate]:
    """One certificate per saga in scope: ``saga_ids``, or every saga with a row since ``since``
    (every saga when None), then one per saga whose only trace is an overdue approval.

    ``runs``: where to read how each saga's run chain stands in Temporal (an effect a
    terminated saga left is live); None judges by the journal alone.
    """
    now = now or datetime.now(UTC)
    overdue = await _overdue(approvals, saga_ids, approval_sla, now)
    scope = list(saga_ids) if saga_ids is not None else await journal.saga_ids(since=since)
    chains = await journal.chains(scope) if runs is not None else {}
    async with aclosing(
        verify_journal(journal, saga_ids=scope, checkpoints=checkpoints, keyring=keyring)
    ) as reports:
        async for report in reports:
            cert = Certificate(report.saga_id, report.verdict.rows)
            for fault in report.faults():
                cert.findings.append(
                    Finding(Kind.EVIDENCE, report.saga_id, fault.seq, fault.detail)
                )
            for dangling in report.verdict.dangling:
                cert.findings.append(
                    Finding(
                        Kind.UNKNOWN_OUTCOME,
                        report.saga_id,
                        dangling.seq,
                        f"INTENT of {dangling.tool_name} has no outcome: the call may or may "
                        "not have happened",
                    )
                )
            chain = chains.get(report.saga_id)
            run = None if chain is None or runs is None else await runs.run(*chain)
            if report.verdict.ok:
                rows = await journal.read(report.saga_id)
                cert.findings += effect_findings(report.saga_id, rows, run)
                cert.corrected = corrections(report.saga_id, rows)
            # findings about the saga's workflow itself (``run``: a task that keeps failing)
            # go here
            cert.findings += overdue.pop(report.saga_id, [])
            yield cert
    for saga_id, findings in overdue.items():
        yield Certificate(saga_id, 0, findings)


async def _overdue(
    approvals: ApprovalStore,
    saga_ids: Sequence[str] | None,
    sla: timedelta,
    now: datetime,
) -> dict[str, list[Finding]]:
    """Requests waiting longer than ``sla``, or past their deadline, by saga."""
    found: dict[str, list[Finding]] = {}
    wanted = None if saga_ids is None else set(saga_ids)
    after = None
    while True:
        page = await approvals.page(InboxFilter(), after=after, limit=_PAGE)
        for req in page:
            if wanted is not None and req.saga_id not in wanted:
                continue
            waited = now - req.created_at
            late = req.expires_at is not None and req.expires_at <= now
            if waited > sla or late:
                why = "is past its deadline" if late else f"has waited {_duration(waited)}"
                found.setdefault(req.saga_id, []).append(
                    Finding(
                        Kind.APPROVAL_OVERDUE,
                        req.saga_id,
                        req.journal_seq,
                        f"the approval of {req.tool_name} {why} (SLA {_duration(sla)})",
                    )
                )
        if len(page) < _PAGE:
            return found
        after = page[-1].cursor


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds >= 86400:
        return f"{seconds // 86400} d {seconds % 86400 // 3600} h"
    if seconds >= 3600:
        return f"{seconds // 3600} h {seconds % 3600 // 60} min"
    return f"{seconds // 60} min {seconds % 60} s"


def junit_xml(certificates: Sequence[Certificate]) -> str:
    """JUnit XML for CI systems: a test case per saga, a failure per finding."""
    failing = sum(1 for c in certificates if not c.ok)
    suite = ElementTree.Element(
        "testsuite",
        name="sagacity certify",
        tests=str(len(certificates)),
        failures=str(failing),
        errors="0",
    )
    for cert in certificates:
        case = ElementTree.SubElement(suite, "testcase", classname="saga", name=cert.saga_id)
        for finding in cert.findings:
            failure = ElementTree.SubElement(
                case,
                "failure",
                type=finding.kind.value,
                message=f"seq {finding.seq}: {finding.detail}" if finding.seq else finding.detail,
            )
            failure.text = finding.detail
    suites = ElementTree.Element("testsuites")
    suites.append(suite)
    return ElementTree.tostring(suites, encoding="unicode", xml_declaration=True) + "\n"
