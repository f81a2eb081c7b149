"""Results read back from the journal: a compensation gets the tool's real result or does not run.

A SUSPECT call resolved as happened is journaled ``{"$resolution": true, "resolved_by": …,
"result": …}``; every path
that rebuilds a call's result from the journal (a compensation after continue-as-new, the rows a
reset run reads back, the adoption of an effect a run left live, reconcile's probes) must hand on
the result the human gave, not that envelope. A result the journal holds redacted (too big for
the workflow, so only the journal has it) cannot be had at all: its undo does not run, and the
saga is flagged for a human. Calls queued behind the saga's lock do not start once it compensates.

Real Temporal and Postgres; the SUSPECT call is made the way a crash makes one: the worker stops
while the tool runs, and the call's retry finds its INTENT with no outcome.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from temporalio import workflow
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from bench.long_saga import run_chain
from sagacity import CompensationContext, compensable
from sagacity.approvals import resolve_suspect
from sagacity.evidence.certify import Kind, effect_findings
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.reconcile import Verdict, reconcile
from sagacity.evidence.redaction import Redactor
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import (
    Abort,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.tools import ProbeContext, ToolRegistry
from sagacity.workflow import Saga
from tests.temporal import sample_tools
from tests.temporal.conftest import (
    awaiting_approval,
    forget_killed_worker,
    intent_written,
    phases,
    serving,
    wait_for,
)
from tests.temporal.test_operations import reset_after_first_call
from workflows.order.shop import Shop

#: names whose ``make_thing`` call hangs until its worker stops
HANG: set[str] = set()
#: what each undo was given as the call's result, in order
UNDONE: list[tuple[str, Any]] = []
#: what each probe was given as the call's result
PROBED: list[Any] = []

RESOLVED = {"thing_id": "T-42"}


@compensable(by="unmake_thing")
async def make_thing(name: str) -> dict[str, str]:
    """Makes a thing; hangs (for the test to stop its worker mid-call) when told to."""
    if name in HANG:
        await asyncio.sleep(3600)
    return {"thing_id": f"T-{name}"}


async def unmake_thing(ctx: CompensationContext) -> None:
    UNDONE.append(("unmake_thing", ctx.result))


@make_thing.probe
def thing_exists(ctx: ProbeContext) -> bool:
    PROBED.append(ctx.result)
    return False


@compensable(by="shred_secret")
def big_secret(size: int) -> dict[str, str]:
    """A result too big for the workflow, with a field the default rules redact."""
    return {"blob": "x" * size, "api_token": "tok-only-the-tool-knows"}


def shred_secret(ctx: CompensationContext) -> None:
    UNDONE.append(("shred_secret", ctx.result))


OPTIONS = SagaOptions(heartbeat_timeout_s=2, compensation_backoff_s=0.1)


@workflow.defn(name="tests.ThingAfterReset", sandboxed=False)
class ThingAfterReset:
    """Makes a thing and notes what it got back, then waits for approval of a wire.

    A reset run calls in another order (as a workflow fixed and redeployed may): it sets a flag
    first, so the journal holds the thing's rows where the run expected its own, and the run
    reads them back and adopts the thing instead of making it again.
    """

    @workflow.init
    def __init__(self, name: str) -> None:
        self.saga = Saga(OPTIONS)

    @workflow.run
    async def run(self, name: str) -> SagaResult:
        saga = self.saga

        async def body() -> None:
            await saga.call("set_flag", name="a")
            info = workflow.info()
            if info.run_id != info.first_execution_run_id:
                await saga.call("set_flag", name="b")
            thing = await saga.call("make_thing", name=name)
            await saga.call("send_note", text=json.dumps(thing, sort_keys=True))
            await saga.call("wire", amount=1, api_token="tok-wire")

        return await saga.run(body)


@workflow.defn(name="tests.QueuedCalls", sandboxed=False)
class QueuedCalls:
    """Three calls at once: the first fails, the other two wait for the saga's lock."""

    @workflow.init
    def __init__(self) -> None:
        self.saga = Saga(OPTIONS)

    @workflow.run
    async def run(self) -> SagaResult:
        saga = self.saga

        async def body() -> None:
            await asyncio.gather(
                saga.call("decline", reason="first"),
                *(saga.call("set_flag", name=n) for n in ("b", "c", "d")),
            )

        return await saga.run(body)


TOOLS = [*sample_tools.TOOLS, make_thing, big_secret]


@asynccontextmanager
async def _worker(
    client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoints: CheckpointWriter,
    redactor: Redactor,
) -> AsyncIterator[Worker]:
    async with serving(
        client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=TOOLS,
        workflows=[ThingAfterReset, QueuedCalls],
        redactor=redactor,
        checkpoints=checkpoints,
    ) as worker:
        yield worker


def _clear() -> None:
    HANG.clear()
    UNDONE.clear()
    PROBED.clear()


async def _suspect(
    client: Client,
    journal: JournalStore,
    worker: Callable[[], Any],
    start: Callable[[], Any],
    name: str,
) -> WorkflowHandle[Any, SagaResult]:
    """Start a saga whose ``make_thing`` call is left with no outcome: its worker stops while
    the tool runs (the call's retry, on the next worker, finds it SUSPECT); the handle."""
    HANG.add(name)
    async with worker():
        handle: WorkflowHandle[Any, SagaResult] = await start()
        await intent_written(journal, handle.id, "make_thing")
    HANG.discard(name)
    await forget_killed_worker(client, handle.id)
    return handle


async def _resolve(client: Client, journal: JournalStore, handle: WorkflowHandle[Any, Any]) -> None:
    """Resolve the saga's SUSPECT ``make_thing`` call as happened, with :data:`RESOLVED`."""
    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None and status.suspect.tool_name == "make_thing"
    await resolve_suspect(
        client,
        handle.id,
        status.suspect.call_seq,
        resolver="alice",
        happened=True,
        result=RESOLVED,
        journal=journal,
    )


async def test_a_resolved_suspect_is_undone_with_its_result_after_continue_as_new(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
    shop: Shop,
) -> None:
    _clear()
    sid = f"thing-can-{uuid.uuid4().hex[:8]}"
    flags = [f"f{i}" for i in range(16)]
    spec = SagaSpec(
        steps=[
            Step(tool="make_thing", args={"name": sid}, id="thing"),
            *(Step(tool="set_flag", args={"name": f}) for f in flags),
            Step(tool="decline", args={"reason": "stop here"}),
        ],
        options=OPTIONS.model_copy(update={"continue_as_new_events": 50}),
    )

    def worker() -> Any:
        return _worker(temporal_client, task_queue, journal, approvals, checkpoint_writer, redactor)

    async def start() -> WorkflowHandle[Any, SagaResult]:
        return await temporal_client.start_workflow(
            STEPS_WORKFLOW, spec, id=sid, task_queue=task_queue, result_type=SagaResult
        )

    handle = await _suspect(temporal_client, journal, worker, start, sid)
    async with worker():
        await _resolve(temporal_client, journal, handle)
        result = await asyncio.wait_for(handle.result(), 120)

    assert result.status is SagaState.COMPENSATED, result
    assert len(await run_chain(temporal_client, sid)) >= 4  # continued as new 3 times or more
    rows = await journal.read(sid)
    assert json.loads(rows[1].payload) == {
        "$resolution": True,
        "resolved_by": "alice",
        "result": RESOLVED,
    }
    # the thing was undone in a later run, from the journal: with the result alice gave
    assert UNDONE == [("unmake_thing", RESOLVED)]
    assert sample_tools.EFFECTS[-1] == "unset f0"

    # reconcile's probe is given the same result
    checks = [c async for c in reconcile(journal, ToolRegistry(TOOLS), [sid])]
    (check,) = checks[0].checks
    assert (check.tool_name, check.verdict) == ("make_thing", Verdict.OK)
    assert PROBED == [RESOLVED]


async def test_a_reset_run_adopts_a_resolved_suspect_with_its_result_and_undoes_it_so(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
    shop: Shop,
) -> None:
    _clear()
    sid = f"thing-reset-{uuid.uuid4().hex[:8]}"

    def worker() -> Any:
        return _worker(temporal_client, task_queue, journal, approvals, checkpoint_writer, redactor)

    async def start() -> WorkflowHandle[Any, SagaResult]:
        return await temporal_client.start_workflow(
            "tests.ThingAfterReset", sid, id=sid, task_queue=task_queue, result_type=SagaResult
        )

    handle = await _suspect(temporal_client, journal, worker, start, sid)
    noted = f"note {json.dumps(RESOLVED)}"
    async with worker():
        await _resolve(temporal_client, journal, handle)
        await wait_for(handle, awaiting_approval)
        assert ["set a", noted] == sample_tools.EFFECTS

        run_id = await reset_after_first_call(temporal_client, handle)
        again = temporal_client.get_workflow_handle(sid, run_id=run_id, result_type=SagaResult)
        # the reset run read the thing's rows back, adopted it and asks for the wire again
        await wait_for(again, awaiting_approval, timeout=60)
        await again.signal("abort", Abort(reason="enough", by="alice"))
        result = await asyncio.wait_for(again.result(), 60)

    assert result.status is SagaState.ABORTED, result
    # adopted with the result alice gave: the note made from it is the same note, not made again
    assert sample_tools.EFFECTS[:3] == ["set a", noted, "set b"]
    assert [e for e in sample_tools.EFFECTS if e.startswith("note")] == [noted]
    # and the thing, read back from the rows the first run wrote, is undone with that result
    assert UNDONE == [("unmake_thing", RESOLVED)]
    (thing,) = [e for e in result.compensated if e.tool_name == "make_thing"]
    assert thing.result == RESOLVED
    assert (await journal.verify(sid)).ok


async def test_an_undo_whose_result_the_journal_holds_redacted_does_not_run_and_is_flagged(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
    shop: Shop,
) -> None:
    _clear()
    sid = f"secret-{uuid.uuid4().hex[:8]}"
    spec = SagaSpec(
        steps=[
            Step(tool="set_flag", args={"name": "a"}),
            # over 512 KiB: the workflow is not handed it, only the journal holds it, redacted
            Step(tool="big_secret", args={"size": 600_000}),
            Step(tool="set_flag", args={"name": "never"}),
        ],
        options=OPTIONS,
    )
    async with _worker(
        temporal_client, task_queue, journal, approvals, checkpoint_writer, redactor
    ):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW, spec, id=sid, task_queue=task_queue, result_type=SagaResult
        )
        result = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query("status", result_type=SagaStatus)

    # the undo never ran on markers; the flag was undone; a human is told which effect is live
    assert UNDONE == []
    assert sample_tools.EFFECTS == ["set a", "unset a"]
    assert result.status is SagaState.COMPENSATION_FAILED, result
    assert [e.tool_name for e in result.compensation_failed] == ["big_secret"]
    assert result.needs_attention is not None and "big_secret (seq 3)" in result.needs_attention
    assert status.state is SagaState.COMPENSATION_FAILED
    assert status.needs_attention == result.needs_attention
    assert await phases(journal, sid) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("big_secret", "INTENT"),
        ("big_secret", "EXECUTED"),
        ("big_secret", "COMPENSATION_FAILED"),
        ("set_flag", "COMPENSATED"),
    ]
    rows = await journal.read(sid)
    failed = json.loads(rows[4].payload)
    assert failed["type"] == "ResultUnavailable"
    assert "did not run" in failed["message"] and "result/api_token" in failed["message"]
    assert "tok-only-the-tool-knows" not in rows[3].payload + rows[4].payload
    # certify names it
    findings = effect_findings(sid, rows)
    assert [(f.kind, f.seq) for f in findings] == [(Kind.COMPENSATION_FAILED, 5)]
    assert "big_secret" in findings[0].detail
    assert (await journal.verify(sid)).ok


async def test_calls_queued_behind_the_lock_do_not_start_once_the_saga_compensates(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    redactor: Redactor,
    shop: Shop,
) -> None:
    _clear()
    sid = f"queued-{uuid.uuid4().hex[:8]}"
    async with _worker(
        temporal_client, task_queue, journal, approvals, checkpoint_writer, redactor
    ):
        handle = await temporal_client.start_workflow(
            "tests.QueuedCalls", id=sid, task_queue=task_queue, result_type=SagaResult
        )
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.COMPENSATED, result
    # "b" had the lock before the failure reached the body; "c" and "d" were still queued when
    # the saga chose to compensate: they never started, and nothing was journaled for them
    assert sample_tools.EFFECTS == ["set b", "unset b"]
    assert [(t, p) for t, p in await phases(journal, sid) if t == "set_flag"] == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("set_flag", "COMPENSATED"),
    ]
