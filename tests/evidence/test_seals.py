"""Sealed sagas: a saga's end is signed, and a row written after it is reported with its seq.

Real sagas on a real Temporal server are sealed by their worker; their journals are then
attacked through the owner's connection. The seal itself, reopened sagas, duplicate seals and
bundles are checked on sagas written the way a checkpointing worker writes them.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import uuid
from contextlib import aclosing
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity import compensable
from sagacity.call_context import current_call
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.bundle import BundleVerdict, verify_bundle
from sagacity.evidence.checkpoints import (
    Checkpoint,
    CheckpointDir,
    CheckpointWriter,
    Kind,
    parse_line,
)
from sagacity.evidence.export import export_bundle
from sagacity.evidence.keys import load_public_key
from sagacity.evidence.report import Agreement, SagaReport, Source
from sagacity.journal import Draft, Entry, Phase, seal
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import Abort, SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.saga import Saga
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.tools import CompensationContext
from tests.approvals.conftest import CliResult
from tests.evidence.conftest import anchored_saga
from tests.evidence.test_cli import json_lines
from tests.evidence.test_tamper_suite import insert, rewrite
from tests.ops.conftest import (
    Cli,
    StartWorker,
    anchor_env,
    start_worker,  # noqa: F401  (a fixture)
)
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest, order_steps


def chained_after(head: Entry, phase: Phase = Phase.EXECUTED) -> Entry:
    """A row after ``head``, chained to it as the hash rules say: what the owner can compute."""
    draft = Draft(head.saga_id, "refund", phase, '{"amount": 5000}', '{"id": "re-evil"}')
    return seal(draft, seq=head.seq + 1, prev_hash=head.hash, timestamp=datetime.now(UTC))


async def append_after(
    owner: psycopg.AsyncConnection, journal: JournalStore, saga_id: str, rows: int = 1
) -> None:
    head = (await journal.read(saga_id))[-1]
    for _ in range(rows):
        head = chained_after(head)
        await insert(owner, [head])


async def sealed_saga(journal: JournalStore, writer: CheckpointWriter, saga_id: str) -> Entry:
    """Six checkpointed rows, then the seal its worker writes when the saga completes."""
    last = (await anchored_saga(journal, writer, saga_id))[-1]
    writer.seal(saga_id, last.seq, last.hash, "completed")
    return last


async def report_of(
    journal: JournalStore,
    saga_id: str,
    checkpoints: CheckpointDir | None,
    temporal: Client | None = None,
) -> SagaReport:
    found = verify_journal(journal, saga_ids=[saga_id], checkpoints=checkpoints, temporal=temporal)
    async with aclosing(found) as reports:
        (report,) = [r async for r in reports]
    return report


def lines_of(checkpoints: CheckpointDir, saga_id: str) -> list[Checkpoint]:
    path = checkpoints.log_path(saga_id)
    return [parse_line(line) for line in path.read_text().splitlines()] if path.exists() else []


def seals_of(checkpoints: CheckpointDir, saga_id: str) -> list[Checkpoint]:
    return [cp for cp in lines_of(checkpoints, saga_id) if cp.kind is Kind.SEALED]


# -- the seal and what verification makes of it ---------------------------------------------------


async def test_a_sealed_saga_verifies_and_the_report_says_sealed(
    journal: JournalStore, writer: CheckpointWriter, checkpoints: CheckpointDir, saga_id: str
) -> None:
    await sealed_saga(journal, writer, saga_id)

    report = await report_of(journal, saga_id, checkpoints)

    assert report.ok, report.faults()
    (check,) = report.checks
    assert (check.agreement, check.seq) == (Agreement.AGREES, 6)
    assert "sealed" in check.detail and "completed" in check.detail
    (sealed,) = seals_of(checkpoints, saga_id)
    assert sealed.verify(checkpoints.keys) is None and sealed.state == "completed"


async def test_each_row_after_the_seal_is_named_with_the_anchor(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    saga_id: str,
) -> None:
    many = saga_id + "-many"
    await sealed_saga(journal, writer, saga_id)
    await sealed_saga(journal, writer, many)
    await append_after(owner, journal, saga_id, rows=3)
    await append_after(owner, journal, many, rows=12)

    report = await report_of(journal, saga_id, checkpoints)
    report_many = await report_of(journal, many, checkpoints)

    assert report.verdict.ok and not report.ok  # a well-chained tail: only the seal can tell
    (fault,) = report.faults()
    assert (fault.source, fault.agreement, fault.seq) == (Source.CHECKPOINT, Agreement.DISAGREES, 7)
    assert fault.detail.startswith(
        "rows 7, 8, 9 were written after the saga ended: sealed at seq 6 (completed, signed "
    )
    (fault_many,) = report_many.faults()
    assert fault_many.detail.startswith(
        "rows 7, 8, 9, 10, 11, 12, 13, 14, 15, …, 18 (12 rows) were written after the saga "
        "ended: sealed at seq 6"
    )


async def test_a_badly_chained_row_after_the_seal_is_named_twice(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    saga_id: str,
) -> None:
    last = await sealed_saga(journal, writer, saga_id)
    broken = chained_after(last)
    await insert(owner, [replace(broken, hash="0" * 64)])

    report = await report_of(journal, saga_id, checkpoints)

    chain, after = report.faults()
    assert (chain.source, chain.seq) == (Source.CHAIN, 7)
    assert (after.source, after.seq) == (Source.CHECKPOINT, 7)
    assert after.detail.startswith("row 7 was written after the saga ended: sealed at seq 6")
    assert "the chain breaks at seq 7" in after.detail


async def test_a_seal_that_disagrees_with_its_row_is_a_checkpoint_disagreement(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    saga_id: str,
) -> None:
    await sealed_saga(journal, writer, saga_id)
    await rewrite(owner, journal, saga_id, 6, '{"amount": 1, "to": "Mallory"}')

    report = await report_of(journal, saga_id, checkpoints)

    (fault,) = report.faults()
    assert (fault.source, fault.agreement, fault.seq) == (Source.CHECKPOINT, Agreement.DISAGREES, 6)
    assert "the journal was rewritten" in fault.detail and "still agrees at seq 5" in fault.detail


async def test_a_head_signed_after_the_seal_reopens_the_saga_until_it_seals_again(
    journal: JournalStore, writer: CheckpointWriter, checkpoints: CheckpointDir, saga_id: str
) -> None:
    """A reset of an ended saga goes on in its journal; its worker signs each new head."""
    await sealed_saga(journal, writer, saga_id)
    row = await journal.append(Draft(saga_id, "pay", Phase.INTENT, '{"amount": 9}'))
    writer.record(saga_id, row.seq, row.hash)

    reopened = await report_of(journal, saga_id, checkpoints)
    row = await journal.append(Draft(saga_id, "pay", Phase.EXECUTED, '{"amount": 9}', "{}"))
    writer.record(saga_id, row.seq, row.hash)
    writer.seal(saga_id, row.seq, row.hash, "completed")
    resealed = await report_of(journal, saga_id, checkpoints)

    assert reopened.ok and "sealed" not in reopened.checks[0].detail
    assert resealed.ok and "sealed" in resealed.checks[0].detail
    assert resealed.checks[0].seq == 8


async def test_a_seal_written_twice_is_harmless(
    journal: JournalStore, writer: CheckpointWriter, checkpoints: CheckpointDir, saga_id: str
) -> None:
    last = await sealed_saga(journal, writer, saga_id)
    writer.seal(saga_id, last.seq, last.hash, "completed")  # a retried seal activity

    report = await report_of(journal, saga_id, checkpoints)

    assert report.ok and len(seals_of(checkpoints, saga_id)) == 2


def test_a_seal_line_names_its_state_and_only_a_seal_does(
    writer: CheckpointWriter, checkpoints: CheckpointDir, saga_id: str
) -> None:
    sealed = writer.seal(saga_id, 3, "a" * 64, "compensated")
    head = writer.record(saga_id, 3, "a" * 64)

    assert '"state":"compensated"' in sealed.line() and "state" not in head.line()
    assert parse_line(sealed.line()) == sealed and sealed.verify(checkpoints.keys) is None
    stateless = sealed.line().replace(',"state":"compensated"', "")
    with pytest.raises(ValueError, match="only a seal"):
        parse_line(stateless)
    # the state is signed: changing it breaks the signature
    forged = parse_line(sealed.line().replace("compensated", "completed"))
    assert forged.verify(checkpoints.keys) == "the signature does not verify"


async def test_a_bundle_carries_the_seal_and_reports_rows_after_it(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    saga_id: str,
    tmp_path: Path,
) -> None:
    intact = saga_id + "-intact"
    await sealed_saga(journal, writer, saga_id)
    await sealed_saga(journal, writer, intact)
    await append_after(owner, journal, saga_id, rows=2)
    out = tmp_path / "bundle"
    await export_bundle(
        journal, out, [saga_id, intact], checkpoints=checkpoints, signing_key=writer.key
    )

    report = verify_bundle(out, public_key=checkpoints.key)

    assert report.verdict() is BundleVerdict.FAILED and report.problems == []
    by_id = {s.saga_id: s for s in report.sagas}
    assert by_id[intact].ok
    (fault,) = by_id[saga_id].faults()
    assert (fault.source, fault.seq) == (Source.CHECKPOINT, 7)
    assert fault.detail.startswith("rows 7, 8 were written after the saga ended: sealed at seq 6")
    assert any(
        cp.kind is Kind.SEALED
        for cp in lines_of(CheckpointDir(out / "checkpoints", checkpoints.key), saga_id)
    )


# -- sagas sealed by their worker ---------------------------------------------------------------


def session_checkpoints(settings: Settings) -> CheckpointDir:
    """The checkpoints the session's workers sign, read as a verifier does."""
    assert settings.checkpoint_dir is not None and settings.checkpoint_public_key is not None
    return CheckpointDir(settings.checkpoint_dir, load_public_key(settings.checkpoint_public_key))


async def run_saga(
    client: Client, worker: Worker, steps: list[Step], options: SagaOptions | None = None
) -> SagaResult:
    result: SagaResult = await client.execute_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=steps, options=options or SagaOptions()),
        id=f"ev-seal-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    return result


async def test_each_way_a_saga_ends_is_sealed_with_its_state(
    temporal_client: Client,
    worker: Worker,
    journal: JournalStore,
    settings: Settings,
    shop: Shop,
) -> None:
    checkpoints = session_checkpoints(settings)
    completed = await run_saga(temporal_client, worker, [Step(tool="set_flag", args={"name": "a"})])
    compensated = await run_saga(
        temporal_client,
        worker,
        [Step(tool="set_flag", args={"name": "b"}), Step(tool="explode", args={"reason": "no"})],
    )
    await shop.arm_fault("release_inventory", "warehouse offline", times=-1)
    failed = await run_saga(
        temporal_client,
        worker,
        [
            Step(tool="reserve_inventory", args={"product_id": "p-1", "quantity": 1}),
            Step(tool="explode", args={"reason": "no"}),
        ],
        SagaOptions(compensation_attempts=1),
    )
    cancelled = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[
                Step(tool="set_flag", args={"name": "c"}),
                Step(tool="slow_note", args={"text": "d", "seconds": 1}),
            ]
        ),
        id=f"ev-seal-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    await wait_for(cancelled, lambda s: s.running == "slow_note")
    await cancelled.cancel()
    aborted = await cancelled.result()

    for result, state in (
        (completed, SagaState.COMPLETED),
        (compensated, SagaState.COMPENSATED),
        (failed, SagaState.COMPENSATION_FAILED),
        (aborted, SagaState.ABORTED),
    ):
        assert result.status is state
        sealed = checkpoints.load(result.saga_id).seal()
        assert sealed is not None
        assert (sealed.seq, sealed.hash, sealed.state) == (
            result.head.seq,
            result.head.hash,
            state.value,
        )
        report = await report_of(journal, result.saga_id, checkpoints)
        assert report.ok and f"sealed {sealed.at}" in report.checks[0].detail

    # the activity that wrote the last row sealed it: no local activity at the end (nor at the
    # start: a new steps saga opens its journal in its first call's activity)
    for result in (completed, compensated):
        assert len(seals_of(checkpoints, result.saga_id)) == 1
        assert await local_activities(temporal_client, result.saga_id) == []
    # a compensation that failed has no row to seal in: the end is sealed on its own
    assert (await local_activities(temporal_client, failed.saga_id))[-1] == "sagacity.seal_saga"
    # cancelled during its last call, which sealed its row as the end: the compensation rows
    # went on past that seal, and the saga's real end sealed again
    first, last = seals_of(checkpoints, aborted.saga_id)
    assert (first.state, first.seq, last.state) == ("completed", 4, "aborted")


async def local_activities(client: Client, workflow_id: str) -> list[str]:
    """The activity types of the workflow's local activities, in the order its history has them."""
    history = await client.get_workflow_handle(workflow_id).fetch_history()
    types = []
    for event in history.events:
        if event.HasField("marker_recorded_event_attributes"):
            marker = event.marker_recorded_event_attributes
            if marker.marker_name == "core_local_activity":
                data = json.loads(marker.details["data"].payloads[0].data)
                types.append(data["activity_type"])
    return types


async def test_a_saga_waiting_for_a_human_is_not_sealed_until_it_ends(
    temporal_client: Client, worker: Worker, settings: Settings
) -> None:
    checkpoints = session_checkpoints(settings)
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=f"ev-seal-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    waiting = await wait_for(handle, awaiting_approval)

    assert lines_of(checkpoints, handle.id)[-1].seq == waiting.head.seq
    assert seals_of(checkpoints, handle.id) == []
    await handle.signal("abort", Abort(reason="nobody decided", by="ops"))
    result = await handle.result()
    (sealed,) = seals_of(checkpoints, handle.id)
    assert (sealed.seq, sealed.state) == (result.head.seq, "aborted")


async def test_only_the_run_that_ends_a_continued_saga_seals_it(
    temporal_client: Client, worker: Worker, settings: Settings
) -> None:
    steps = [Step(tool="set_flag", args={"name": f"f{i}"}, id=f"f{i}") for i in range(10)]
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=steps, options=SagaOptions(continue_as_new_events=50)),
        id=f"ev-seal-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    result = await handle.result()

    assert result.status is SagaState.COMPLETED
    assert handle.first_execution_run_id != (await handle.describe()).run_id  # it continued
    (sealed,) = seals_of(session_checkpoints(settings), result.saga_id)
    assert sealed.seq == result.head.seq == 20


async def test_a_worker_killed_after_the_last_row_leaves_the_seal_to_the_next(
    temporal_client: Client,
    task_queue: str,
    start_worker: StartWorker,  # noqa: F811
    journal: JournalStore,
    settings: Settings,
    shop: Shop,
) -> None:
    """The saga's log is a pipe the test reads; it stops reading once the first call's outcome
    is signed, so the worker blocks sealing the last row (the row is written) and is killed
    there: a new worker finishes the call from the journal and seals the saga."""
    checkpoints = session_checkpoints(settings)
    saga_id = f"ev-seal-kill-{uuid.uuid4().hex[:8]}"
    log = checkpoints.log_path(saga_id)
    log.parent.mkdir(parents=True, exist_ok=True)  # made by the first worker otherwise
    os.mkfifo(log)
    reader = os.open(log, os.O_RDONLY | os.O_NONBLOCK)
    first = await start_worker()
    await shop.arm_fault("create_order", "", delay_s=2)  # stalls, then takes effect
    spec = order_steps(options=SagaOptions(heartbeat_timeout_s=2))
    spec.steps = spec.steps[:2]  # reserve, create the order: rows 1 to 4
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW, spec, id=saga_id, task_queue=task_queue, result_type=SagaResult
    )
    signed = b""
    deadline = asyncio.get_running_loop().time() + 30
    while b'"seq":2' not in signed:
        assert asyncio.get_running_loop().time() < deadline, f"signed so far: {signed!r}"
        try:
            signed += os.read(reader, 65536)
        except BlockingIOError:
            await asyncio.sleep(0.005)
    os.close(reader)  # from now on a checkpoint write waits for a reader that never comes
    while await journal.get(saga_id, 4) is None:
        await asyncio.sleep(0.05)
    await asyncio.sleep(0.5)
    assert first.proc is not None
    first.proc.send_signal(signal.SIGKILL)
    first.proc.wait()
    await forget_killed_worker(temporal_client, saga_id)
    log.unlink()
    log.write_bytes(signed)  # the lines signed before the kill, as a plain log again

    await start_worker()
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.COMPLETED and result.head.seq == 4
    # a call's INTENT is covered by its outcome's checkpoint
    assert [cp.seq for cp in lines_of(checkpoints, saga_id) if cp.kind is Kind.HEAD] == [2]
    (sealed,) = seals_of(checkpoints, saga_id)
    assert (sealed.seq, sealed.hash) == (4, result.head.hash)
    report = await report_of(journal, saga_id, checkpoints)
    assert report.ok and "sealed" in report.checks[0].detail


# A tool whose effect is an intrusion: the database's owner writes a row past the one the
# tool's EXECUTED row will take, so the saga ends behind the journal's real head.
_OWNER_URL: list[str] = []


@compensable(by="forget_intrusion")
async def intrude() -> str:
    call = current_call()
    async with await psycopg.AsyncConnection.connect(_OWNER_URL[0], autocommit=True) as owner:
        draft = Draft(call.saga_id, "refund", Phase.EXECUTED, "{}", "{}")
        ahead = seal(draft, seq=call.seq + 2, prev_hash="0" * 64, timestamp=datetime.now(UTC))
        await insert(owner, [ahead])
    return "done"


def forget_intrusion(ctx: CompensationContext) -> None:
    del ctx


def sealing_worker(client: Client, task_queue: str, plugin: SagacityPlugin) -> Worker:
    """A worker of the test's own plugin (its tools and workflows, the session's checkpoints)."""
    return Worker(
        client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=timedelta(seconds=1),
    )


@workflow.defn(name="tests.IntrudedBySaga", sandboxed=False)
class IntrudedBySaga:
    """The intrusion as an app's own workflow writes it: plain calls, so a local activity seals."""

    @workflow.run
    async def run(self) -> SagaResult:
        saga = Saga()

        async def body() -> None:
            await saga.call("set_flag", name="a")
            await saga.call("intrude")

        return await saga.run(body)


@pytest.mark.parametrize("ended_by", ["last call", "local activity"])
async def test_a_row_ahead_of_the_end_is_named_and_never_sealed_over(
    ended_by: str,
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    settings: Settings,
    owner_database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A saga's last call sealed its own row as the end, so the row past it is named by the
    seal too; a local activity that finds the journal past the end seals nothing, and says so."""
    _OWNER_URL[:] = [owner_database_url]
    plugin = SagacityPlugin(
        journal=journal,
        approvals=approvals,
        tools=[*sample_tools.TOOLS, intrude],
        workflows=[IntrudedBySaga],
        checkpoints=checkpoint_writer,
    )
    async with sealing_worker(temporal_client, task_queue, plugin):
        saga_id = f"ev-seal-{uuid.uuid4().hex[:8]}"
        if ended_by == "last call":
            spec = SagaSpec(steps=[Step(tool="set_flag", args={"name": "a"}), Step(tool="intrude")])
            result = await temporal_client.execute_workflow(
                STEPS_WORKFLOW, spec, id=saga_id, task_queue=task_queue, result_type=SagaResult
            )
        else:
            result = await temporal_client.execute_workflow(
                IntrudedBySaga.run, id=saga_id, task_queue=task_queue
            )
    checkpoints = session_checkpoints(settings)

    report = await report_of(journal, result.saga_id, checkpoints, temporal_client)

    assert result.status is SagaState.COMPLETED and result.head.seq == 4
    faults = {(f.source, f.seq): f.detail for f in report.faults()}
    assert faults.keys() >= {(Source.CHAIN, 5), (Source.TEMPORAL, 5)}  # chained to nothing
    assert faults[(Source.TEMPORAL, 5)].startswith(
        "row 5 was written after the saga ended: the workflow's result, completed, ends at seq 4"
    )
    if ended_by == "last call":
        (sealed,) = seals_of(checkpoints, result.saga_id)
        assert (sealed.seq, sealed.state) == (4, "completed")
        assert faults[(Source.CHECKPOINT, 5)].startswith(
            "row 5 was written after the saga ended: sealed at seq 4 (completed, signed"
        )
    else:
        assert seals_of(checkpoints, result.saga_id) == []
        assert f"saga {result.saga_id}: its end at seq 4 is not sealed" in caplog.text
        assert "the journal goes on to seq 5" in caplog.text
        (warning,) = [w for w in report.warnings() if w.kind == "unsealed"]
        assert warning.seq == 4 and "hold no seal" in warning.detail


async def test_an_ended_saga_without_a_seal_is_a_warning_not_a_failure(
    sagacity: Cli,
    temporal_client: Client,
    worker: Worker,
    journal: JournalStore,
    settings: Settings,
    checkpoint_writer: CheckpointWriter,
) -> None:
    """A saga that ended before its worker sealed sagas (the cut-over): only Temporal knows."""
    checkpoints = session_checkpoints(settings)
    result = await run_saga(temporal_client, worker, [Step(tool="set_flag", args={"name": "u"})])
    # what a worker from before seals left: the last row's head, signed, and no seal
    checkpoints.log_path(result.saga_id).unlink()
    checkpoint_writer.record(result.saga_id, result.head.seq, result.head.hash)

    unsealed = await report_of(journal, result.saga_id, checkpoints, temporal_client)
    without_temporal = await report_of(journal, result.saga_id, checkpoints)
    text = await sagacity("verify", result.saga_id, "--temporal", extra_env=anchor_env(settings))

    assert unsealed.ok and without_temporal.ok
    (warning,) = unsealed.warnings()
    assert (warning.kind, warning.seq) == ("unsealed", 2)
    assert warning.detail.startswith(
        "the saga ended (the workflow's result, completed, ends at seq 2) but its checkpoints "
        "hold no seal"
    )
    assert without_temporal.warnings() == []
    assert text.code == 0, text.stdout + text.stderr
    assert f"WARNING {result.saga_id} seq 2: {warning.detail}\n" in text.stdout
    assert text.stdout.endswith(
        "1 sagas, 2 rows: all verified, 1 warning (ended sagas with no seal)\n"
    )


# -- the command line, as a new user has it --------------------------------------------------


async def verify_all(
    sagacity: Cli, settings: Settings, saga_id: str
) -> tuple[CliResult, dict[str, Any]]:
    """``sagacity verify --all --json`` with the session's anchors, as the dev stack sets them."""
    result = await sagacity("verify", "--all", "--json", extra_env=anchor_env(settings))
    (mine,) = [r for r in json_lines(result)[:-1] if r["saga_id"] == saga_id]
    return result, mine


async def test_verify_all_with_no_flags_finds_a_row_appended_after_a_saga_completed(
    sagacity: Cli,
    temporal_client: Client,
    worker: Worker,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    settings: Settings,
) -> None:
    """A real saga completes and is sealed; the owner appends a row chained to its end."""
    result = await run_saga(
        temporal_client,
        worker,
        [Step(tool="set_flag", args={"name": "x"}), Step(tool="send_note", args={"text": "y"})],
    )
    _, before = await verify_all(sagacity, settings, result.saga_id)
    await append_after(owner, journal, result.saga_id)

    after, mine = await verify_all(sagacity, settings, result.saga_id)
    text = await sagacity("verify", result.saga_id, extra_env=anchor_env(settings))

    assert before["ok"] is True and result.head.seq == 4
    assert after.code == 1 and mine["ok"] is False and mine["rows"] == 5
    (fault,) = [a for a in mine["anchors"] if a["fatal"]]
    assert (fault["source"], fault["agreement"], fault["seq"]) == ("checkpoint", "disagrees", 5)
    assert fault["detail"].startswith(
        "row 5 was written after the saga ended: sealed at seq 4 (completed, signed "
    )
    assert text.code == 1
    assert text.stdout.splitlines()[:2] == [
        f"FAILED  {result.saga_id}",
        f"  checkpoint seq 5      disagrees: {fault['detail']}",
    ]


@workflow.defn(name="tests.CallAfterLast", sandboxed=False)
class CallAfterLast:
    """A body that calls again after ``call_last``: the sealed end is lifted, then sealed anew."""

    @workflow.run
    async def run(self) -> SagaResult:
        saga = Saga()

        async def body() -> None:
            await saga.call_last("set_flag", name="first end")
            await saga.call("slow_note", text="after the end", seconds=2)

        return await saga.run(body)


async def test_a_call_after_a_sealed_end_never_reads_as_a_row_after_the_end(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    checkpoint_writer: CheckpointWriter,
    settings: Settings,
    shop: Shop,
) -> None:
    plugin = SagacityPlugin(
        journal=journal,
        approvals=approvals,
        tools=sample_tools.TOOLS,
        workflows=[CallAfterLast],
        checkpoints=checkpoint_writer,
    )
    checkpoints = session_checkpoints(settings)
    saga_id = f"ev-seal-after-{uuid.uuid4().hex[:8]}"
    async with sealing_worker(temporal_client, task_queue, plugin):
        handle = await temporal_client.start_workflow(
            CallAfterLast.run, id=saga_id, task_queue=task_queue
        )
        while await journal.get(saga_id, 3) is None:
            await asyncio.sleep(0.05)
        # mid-call: the INTENT after the sealed row 2 is signed as a head, lifting the seal
        during = await report_of(journal, saga_id, checkpoints)
        result = await handle.result()

    assert during.ok, during.faults()
    assert result.status is SagaState.COMPLETED and result.head.seq == 4
    assert [(cp.seq, cp.kind) for cp in lines_of(checkpoints, saga_id)] == [
        (2, Kind.SEALED),
        (3, Kind.HEAD),
        (4, Kind.HEAD),
        (4, Kind.SEALED),
    ]
    assert (await report_of(journal, saga_id, checkpoints)).ok


async def test_a_seal_the_last_rows_activity_could_not_write_is_left_to_the_local_activity(
    temporal_client: Client, worker: Worker, settings: Settings
) -> None:
    """The workflow takes the activity's word for the seal: a write the checkpoint folder
    refused (as an older worker that ignores the request would not write one either) means the
    end is sealed by the local activity, which tries again."""
    checkpoints = session_checkpoints(settings)
    saga_id = f"ev-seal-refused-{uuid.uuid4().hex[:8]}"
    checkpoints.log_path(saga_id).mkdir(parents=True)  # every write to the log fails
    result = await temporal_client.execute_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="set_flag", args={"name": "refused"})]),
        id=saga_id,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )

    assert result.status is SagaState.COMPLETED
    # opened in its first call's activity; sealed by a local activity of its own
    assert await local_activities(temporal_client, saga_id) == ["sagacity.seal_saga"]
