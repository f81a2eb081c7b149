"""Crash survival: the worker is a separate OS process, killed with SIGKILL mid-saga."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.keys import load_public_key
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import (
    Approve,
    Resolve,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
)
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, phases, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

REPO = Path(__file__).resolve().parents[2]


class WorkerProcess:
    """``python -m workers.saga_worker`` on the test stack, started and killed at will."""

    def __init__(
        self,
        endpoints: Endpoints,
        database_url: str,
        task_queue: str,
        log: Path,
        apps: tuple[str, ...] = (),
    ) -> None:
        self.env = {
            **os.environ,
            "SAGACITY_DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": endpoints.temporal_address,
            "SAGACITY_TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
            "SAGACITY_TASK_QUEUE": task_queue,
        }
        self.log = log
        # `sagacity worker --app …` when apps are named, else the module's default (Order)
        self.command = (
            [str(Path(sys.executable).parent / "sagacity"), "worker"]
            + [arg for app in apps for arg in ("--app", app)]
            if apps
            else [sys.executable, "-m", "workers.saga_worker"]
        )
        self.proc: subprocess.Popen[bytes] | None = None

    async def start(self) -> None:
        with self.log.open("ab") as out:
            start = out.tell()
            self.proc = subprocess.Popen(
                self.command,
                cwd=REPO,
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        for _ in range(600):
            with self.log.open("rb") as out:
                out.seek(start)
                if b"worker ready" in out.read():
                    return
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{self.log.read_text()[-2000:]}")
            await asyncio.sleep(0.1)
        raise TimeoutError("worker never became ready")

    def kill(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
async def worker_process(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    shop: Shop,
    settings: Settings,
    tmp_path: Path,
) -> AsyncIterator[WorkerProcess]:
    process = WorkerProcess(endpoints, database_url, task_queue, tmp_path / "worker.log")
    # checkpoints on, as a new user's worker has them, into a folder of the test's own (the
    # transparency log's sequencer off: the session's journal is shared)
    process.env.update(
        SAGACITY_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        SAGACITY_SIGNING_KEY=str(settings.signing_key),
        SAGACITY_LOG_INTERVAL="PT0S",
    )
    await process.start()
    try:
        yield process
    finally:
        process.stop()


OPTIONS = SagaOptions(heartbeat_timeout_s=2, compensation_backoff_s=0.2)


async def start_order(client: Client, task_queue: str) -> tuple[str, object]:
    sid = f"crash-{uuid.uuid4().hex[:8]}"
    handle = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(options=OPTIONS),
        id=sid,
        task_queue=task_queue,
        result_type=SagaResult,
    )
    return sid, handle


async def wait_journal(
    journal: JournalStore, sid: str, predicate: Callable[[list[tuple[str, str]]], bool]
) -> None:
    for _ in range(300):
        if predicate(await phases(journal, sid)):
            return
        await asyncio.sleep(0.1)
    raise TimeoutError(f"journal of {sid} never matched: {await phases(journal, sid)}")


async def test_kill_during_non_idempotent_call_is_suspect_until_resolved(
    temporal_client: Client,
    worker_process: WorkerProcess,
    shop: Shop,
    journal: JournalStore,
    task_queue: str,
    settings: Settings,
) -> None:
    await shop.arm_fault("create_order", "", delay_s=60)  # hangs before any effect
    sid, _ = await start_order(temporal_client, task_queue)
    handle = temporal_client.get_workflow_handle(sid, result_type=SagaResult)
    await wait_journal(journal, sid, lambda p: ("create_order", "INTENT") in p)
    worker_process.kill()
    await forget_killed_worker(temporal_client, sid)
    await worker_process.start()

    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None and status.suspect.tool_name == "create_order"
    assert "not idempotent" in status.suspect.reason
    # the INTENT the dead worker left is the call's own: checkpointed, so the transparency log
    # admits it while a human decides
    assert settings.checkpoint_public_key is not None
    checkpoints = CheckpointDir(
        Path(worker_process.env["SAGACITY_CHECKPOINT_DIR"]),
        load_public_key(settings.checkpoint_public_key),
    )
    latest = checkpoints.load(sid).latest()
    assert latest is not None
    assert (latest.seq, latest.hash) == (status.suspect.call_seq, status.suspect.intent_hash)
    # a human looks at the orders table: the call never took effect
    assert (await shop.snapshot()).placed_orders == 0
    await handle.signal(
        "resolve", Resolve(call_seq=status.suspect.call_seq, resolver="dave", happened=False)
    )
    result = await handle.result()

    assert result.status is SagaState.COMPENSATED
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
        ("create_order", "INTENT"),
        ("create_order", "FAILED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    rows = await journal.read(sid)
    assert "dave" in rows[3].payload
    assert (await journal.verify(sid)).ok
    assert (await shop.snapshot()).available["p-1"] == 10


async def test_kill_between_two_compensations_runs_each_once(
    temporal_client: Client,
    worker_process: WorkerProcess,
    shop: Shop,
    journal: JournalStore,
    task_queue: str,
) -> None:
    await shop.arm_fault("send_confirmation", "mail relay refused the message")
    await shop.arm_fault("release_inventory", "", delay_s=60)  # stalls before undoing
    sid, _ = await start_order(temporal_client, task_queue)
    handle = temporal_client.get_workflow_handle(sid, result_type=SagaResult)
    waiting: SagaStatus = await wait_for(handle, awaiting_approval)
    assert waiting.pending_approval is not None
    await handle.signal(
        "approve", Approve(journal_seq=waiting.pending_approval.journal_seq, approver="alice")
    )
    await wait_journal(journal, sid, lambda p: ("create_order", "COMPENSATED") in p)
    await asyncio.sleep(0.5)  # release_inventory is now stalled inside its activity
    worker_process.kill()
    await forget_killed_worker(temporal_client, sid)
    await worker_process.start()
    result = await asyncio.wait_for(handle.result(), timeout=90)

    assert result.status is SagaState.COMPENSATED
    journal_phases = await phases(journal, sid)
    assert journal_phases[-2:] == [
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    assert journal_phases.count(("create_order", "COMPENSATED")) == 1
    assert journal_phases.count(("reserve_inventory", "COMPENSATED")) == 1
    seqs = [r.seq for r in await journal.read(sid)]
    assert seqs == list(range(1, len(seqs) + 1))
    assert (await journal.verify(sid)).ok
    snap = await shop.snapshot()
    assert snap.available["p-1"] == 10 and snap.placed_orders == 0 and snap.held_reservations == 0


async def test_suspect_call_resolved_as_happened_becomes_an_effect_to_compensate(
    temporal_client: Client,
    worker_process: WorkerProcess,
    shop: Shop,
    journal: JournalStore,
    task_queue: str,
) -> None:
    await shop.arm_fault("create_order", "", delay_s=60)
    await shop.arm_fault("send_confirmation", "relay down")
    sid, _ = await start_order(temporal_client, task_queue)
    handle = temporal_client.get_workflow_handle(sid, result_type=SagaResult)
    await wait_journal(journal, sid, lambda p: ("create_order", "INTENT") in p)
    worker_process.kill()
    await forget_killed_worker(temporal_client, sid)
    await worker_process.start()
    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None
    # the human found the order placed by hand in another system and says so
    order = {"order_id": "ord-by-hand", "product_id": "p-1", "quantity": 2}
    await handle.signal(
        "resolve",
        Resolve(call_seq=status.suspect.call_seq, resolver="dave", happened=True, result=order),
    )
    waiting = await wait_for(handle, awaiting_approval, timeout=60)
    assert waiting.pending_approval is not None
    # the next step got the order id the human gave
    assert "ord-by-hand" in waiting.pending_approval.input_json
    await handle.signal(
        "approve", Approve(journal_seq=waiting.pending_approval.journal_seq, approver="alice")
    )
    result = await handle.result()

    assert result.status is SagaState.COMPENSATED
    assert [e.tool_name for e in result.compensated] == ["create_order", "reserve_inventory"]
    rows = await journal.read(sid)
    assert rows[3].phase.value == "EXECUTED" and '"resolved_by":"dave"' in rows[3].payload
    assert (await journal.verify(sid)).ok
