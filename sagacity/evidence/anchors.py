"""Verify the journal in Postgres against every anchor within reach.

Each saga's chain is recomputed from its rows (streamed), then compared with what witnesses
outside the table recorded: the signed checkpoints, the transparency log's leaves under its
latest signed tree head (:mod:`sagacity.evidence.logcheck`), and, given a Temporal client, the
head the saga workflow itself holds (its result once completed, its ``status`` query while
running).
The workflow is looked up by the saga's id, which is its workflow id unless the saga chose
another. A saga that ended, by its seal or its workflow's result, may have no row after that
head.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from datetime import timedelta

from pydantic import BaseModel
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.service import RPCError, RPCStatusCode

from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.decisions import DecisionCheck, Keyring
from sagacity.evidence.logcheck import LogAnchor
from sagacity.evidence.report import (
    Agreement,
    Anchor,
    AnchorCheck,
    ReportWarning,
    SagaReport,
    Source,
    checkpoint_probe,
    compare,
    decision_checks,
    decision_notes,
    saga_report,
    settle_async,
)
from sagacity.journal import GENESIS_HASH, Verdict
from sagacity.store.journal import JournalStore

__all__ = ["temporal_anchor", "verify_journal"]


class _Head(BaseModel):
    seq: int = 0
    hash: str = GENESIS_HASH


class _Headed(BaseModel):
    """What anchors in a saga workflow's result or ``status`` query, read as plain data: this
    layer needs none of the Temporal glue's models. Other fields are ignored."""

    head: _Head | None = None
    #: the result's outcome (``completed``, ``compensated``...); the query has ``state`` instead
    status: str = ""
    #: an agent saga's result holds the saga's own under ``saga``
    saga: _Headed | None = None

    def anchor(self) -> tuple[_Head, str]:
        """The head and the outcome, from the saga's own result when this one wraps it."""
        if self.head is None and self.saga is not None:
            return self.saga.anchor()
        if self.head is None:
            raise ValueError("not a saga's result or status: it holds no chain head")
        return self.head, self.status


_RPC_TIMEOUT = timedelta(seconds=10)


async def verify_journal(
    journal: JournalStore,
    *,
    saga_ids: Sequence[str] | None = None,
    checkpoints: CheckpointDir | None = None,
    temporal: Client | None = None,
    keyring: Keyring | None = None,
    log: LogAnchor | None = None,
) -> AsyncGenerator[SagaReport, None]:
    """One report per saga: ``saga_ids`` in order, or every saga in the journal.

    Checking every saga also reports each saga that has checkpoints, or leaves in the log, but
    no rows left (deleted). The journal's pool needs two connections: one streams rows while
    the other looks up the rows anchors point at. With ``keyring``, each saga's decision rows
    are read again and their signatures checked. With ``log`` (and a published tree head),
    each saga's rows are compared with its leaves; checking every saga scans the whole log
    first, and what it finds of the log itself is left in ``log.problems``.
    """
    if log is not None and saga_ids is None and log.latest is not None:
        await log.scan()
    # every saga's id is kept only when deleted sagas are looked for (all sagas, an anchor)
    looked = checkpoints is not None or log is not None
    seen: set[str] | None = set() if saga_ids is None and looked else None
    async with aclosing(journal.verify_all(saga_ids=saga_ids)) as verdicts:
        async for verdict in verdicts:
            if seen is not None:
                seen.add(verdict.saga_id)
            yield await _report(journal, verdict, checkpoints, temporal, keyring, log)
    if seen is None:
        return
    gone = [] if checkpoints is None else list(checkpoints.saga_ids())
    gone += [] if log is None else log.unreported()
    for saga_id in gone:
        if saga_id not in seen:
            seen.add(saga_id)
            empty = Verdict(saga_id, 0, 0, GENESIS_HASH, None)
            yield await _report(journal, empty, checkpoints, temporal, keyring, log)


async def _report(
    journal: JournalStore,
    verdict: Verdict,
    checkpoints: CheckpointDir | None,
    temporal: Client | None,
    keyring: Keyring | None = None,
    tlog: LogAnchor | None = None,
) -> SagaReport:
    async def stored_hash(seq: int) -> str | None:
        row = await journal.get(verdict.saga_id, seq)
        return None if row is None else row.hash

    checks: list[AnchorCheck] = []
    notes: list[ReportWarning] = []
    log = None if checkpoints is None else checkpoints.load(verdict.saga_id)
    if log is not None:
        checks += await settle_async(checkpoint_probe(log, verdict), stored_hash)
    if tlog is not None:
        checks += await tlog.check(verdict.saga_id)
    if temporal is not None:
        found = await temporal_anchor(temporal, verdict.saga_id)
        if isinstance(found, AnchorCheck):
            checks.append(found)
        elif found.seq == 0:
            detail = f"the workflow has journaled nothing yet ({found.note})"
            checks.append(AnchorCheck(Source.TEMPORAL, Agreement.AGREES, detail, 0))
        else:
            probe = compare(Source.TEMPORAL, [found], verdict, "the Temporal workflow")
            checks += await settle_async(probe, stored_hash)
            if found.ended and log is not None and log.latest() and log.seal() is None:
                notes.append(_unsealed(found))
    if keyring is not None and verdict.rows:
        decisions = DecisionCheck(verdict.saga_id, keyring)
        async with aclosing(journal.stream(verdict.saga_id)) as rows:
            async for entry in rows:
                decisions.feed(entry)
        checks += decision_checks(decisions)
        notes += decision_notes(decisions)
    return saga_report(verdict, checks, notes)


def _unsealed(end: Anchor) -> ReportWarning:
    detail = (
        f"the saga ended ({end.ended}) but its checkpoints hold no seal: a row appended after "
        "its end is caught only by asking Temporal (--temporal), and only while the workflow "
        "is kept. It ended before its worker sealed sagas, or its worker could not write the "
        "seal (the worker's log says why)"
    )
    return ReportWarning("unsealed", end.seq, detail)


async def temporal_anchor(client: Client, saga_id: str) -> Anchor | AnchorCheck:
    """The head the saga's workflow holds, or why there is none to compare (never fatal).

    A workflow that is gone (never started, or past the namespace's retention) is ``MISSING``;
    one that cannot answer (no worker for a query, not a saga workflow) is ``UNAVAILABLE``.
    """
    handle = client.get_workflow_handle(saga_id, result_type=_Headed)
    try:
        described = await handle.describe(rpc_timeout=_RPC_TIMEOUT)
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            detail = "no workflow with this id (never started, or past the namespace's retention)"
            return AnchorCheck(Source.TEMPORAL, Agreement.MISSING, detail)
        return AnchorCheck(Source.TEMPORAL, Agreement.UNAVAILABLE, f"Temporal: {exc}")
    try:
        if described.status is WorkflowExecutionStatus.COMPLETED:
            result: _Headed = await handle.result(rpc_timeout=_RPC_TIMEOUT)
            head, outcome = result.anchor()
            ended = f"the workflow's result, {outcome}, ends at seq {head.seq}"
            return Anchor(head.seq, head.hash, "workflow result", ended)
        status = await handle.query("status", result_type=_Headed, rpc_timeout=_RPC_TIMEOUT)
        head, _ = status.anchor()
    except Exception as exc:
        # a witness that cannot answer is reported, not fatal: the other anchors still speak
        detail = f"the workflow could not say its head: {type(exc).__name__}: {exc}"
        return AnchorCheck(Source.TEMPORAL, Agreement.UNAVAILABLE, detail)
    return Anchor(head.seq, head.hash, "workflow status query")
