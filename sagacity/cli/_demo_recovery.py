"""The demo's second act: a worker process is SIGKILLed in the middle of a call, a fresh one
finishes the saga.

Both workers are ``sagacity worker`` processes serving :mod:`sagacity.cli._demo_worker` on a task
queue of their own. The saga reserves stock (``reserve_stock``, idempotent) and then creates the
order. The demo arms a pause in ``reserve_stock`` after its reservation is made, waits until the
journal holds the call's INTENT with no outcome and the tool has reached the pause, and kills
worker 1 there: the effect is real, the journal does not say it happened. Worker 2 then starts;
Temporal notices the dead attempt by its missed heartbeats and retries the call on worker 2,
which runs the tool again because it is declared idempotent, and the saga goes on from
Temporal's history and the journal.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from temporalio.client import Client, WorkflowHandle

from sagacity.cli._demo_journal import JournalRow, Verification, read_verified
from sagacity.cli._demo_worker import PAUSE
from sagacity.errors import DevStackError
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.journal import Phase
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal import names
from sagacity.temporal.models import CallRequest, SagaResult, SagaSpec, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from workflows.order.shop import Shop

__all__ = ["PRODUCT", "Recovery", "run_recovery", "worker_env"]

PRODUCT, QUANTITY = "p-2", 1
TOOL = "reserve_stock"
#: how long the first attempt would wait at the pause, were it not killed
_PAUSE_S = 60.0
_WAIT_S = 60.0
APP = "sagacity.cli._demo_worker"


class Recovery(BaseModel):
    """What the second act did and found."""

    saga_id: str
    killed_pid: int
    killed_tool: str
    #: the INTENT seq of the call that was running when worker 1 died
    killed_seq: int
    fresh_pid: int
    #: which attempt of that call wrote its outcome, and whether worker 2 ran it
    attempt: int
    retried_by_fresh: bool
    status: str
    journal: list[JournalRow]
    verification: Verification
    #: the shop rows this saga made: each call ran its effect once
    reservations: int
    orders: int
    stock_before: int
    stock_after: int

    @property
    def ran_once(self) -> bool:
        """One reservation, one order, the stock down by the quantity once."""
        return (
            self.reservations == 1
            and self.orders == 1
            and self.stock_before - self.stock_after == QUANTITY
        )


def worker_env(setup: dict[str, object], settings: Settings) -> dict[str, str]:
    """The environment that points a ``sagacity worker`` process at the demo's stack: ``setup``,
    the dev stack's settings (``DevSetup.settings``), and ``settings``' Temporal."""
    return {
        **os.environ,
        **{f"SAGACITY_{name.upper()}": str(value) for name, value in setup.items()},
        "SAGACITY_TEMPORAL_ADDRESS": settings.temporal_address or "",
        "SAGACITY_TEMPORAL_NAMESPACE": settings.temporal_namespace,
    }


class _Worker:
    """One ``sagacity worker`` process, its output in a log file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                # the console script beside this interpreter, exactly what `sagacity worker` runs
                [str(Path(sys.executable).with_name("sagacity")), "worker", "--app", APP],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    async def ready(self) -> None:
        deadline = time.monotonic() + _WAIT_S
        while "sagacity worker ready" not in self.log.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise DevStackError(f"the demo's worker (pid {self.pid}) did not start: {self.log}")
            await asyncio.sleep(0.1)

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        """SIGTERM (in-flight calls finish), SIGKILL if it does not exit in time."""
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()


async def run_recovery(
    client: Client,
    journal: JournalStore,
    shop: Shop,
    signer: CheckpointWriter,
    worker_env: dict[str, str],
    logs: Path,
    say: Callable[[str], None],
) -> Recovery:
    """Run the second act; ``worker_env`` points a worker process at the demo's stack, which
    logs to ``logs``/demo-worker-N.log (kept until the next run)."""
    saga_id = f"demo-recovery-{uuid.uuid4().hex[:8]}"
    env = {**worker_env, "SAGACITY_TASK_QUEUE": f"sagacity-demo-crash-{uuid.uuid4().hex[:8]}"}
    logs.mkdir(parents=True, exist_ok=True)
    await shop.arm_fault(PAUSE, "", delay_s=_PAUSE_S)
    stock_before = (await shop.snapshot()).available[PRODUCT]
    workers: list[_Worker] = []
    try:
        first = _Worker(env, logs / "demo-worker-1.log")
        workers.append(first)
        await first.ready()
        say(f"act two: worker 1 started (pid {first.pid}), a separate process")
        handle = await client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[
                    Step(tool=TOOL, args={"product_id": PRODUCT, "quantity": QUANTITY}),
                    Step(
                        tool="create_order",
                        args={
                            "product_id": PRODUCT,
                            "quantity": QUANTITY,
                            "reservation_id": {"$ref": f"{TOOL}.reservation_id"},
                        },
                    ),
                ]
            ),
            id=saga_id,
            task_queue=env["SAGACITY_TASK_QUEUE"],
            result_type=SagaResult,
        )
        seq = await _mid_call(journal, shop, saga_id, first)
        say(
            f"{TOOL} made its reservation and is still running: the journal holds its INTENT "
            f"(seq {seq}) and no outcome"
        )
        first.kill()
        killed_at = time.monotonic()
        say(f"worker 1 (pid {first.pid}) killed with SIGKILL during {TOOL}")
        fresh = _Worker(env, logs / "demo-worker-2.log")
        workers.append(fresh)
        await fresh.ready()
        say(
            f"worker 2 started (pid {fresh.pid}); Temporal retries {TOOL} there once worker 1's "
            "heartbeats stop"
        )
        try:
            result = await asyncio.wait_for(handle.result(), _WAIT_S)
        except TimeoutError:
            raise DevStackError(f"saga {saga_id} did not finish; worker logs in {logs}") from None
        attempt, identity = await _call_attempt(client, handle, seq)
        rows, verification = await read_verified(journal, signer, saga_id)
        verified = "journal verified" if verification.ok else "journal does NOT verify"
        say(
            f"saga finished {time.monotonic() - killed_at:.0f} s after the kill: "
            f"{result.status.value}, {verified}, {verification.rows} rows"
        )
    finally:
        for worker in workers:
            worker.stop()
    reservations, orders = await shop.made_by(saga_id)
    return Recovery(
        saga_id=saga_id,
        killed_pid=first.pid,
        killed_tool=TOOL,
        killed_seq=seq,
        fresh_pid=fresh.pid,
        attempt=attempt,
        retried_by_fresh=identity.startswith(f"{fresh.pid}@"),
        status=result.status.value,
        journal=rows,
        verification=verification,
        reservations=reservations,
        orders=orders,
        stock_before=stock_before,
        stock_after=(await shop.snapshot()).available[PRODUCT],
    )


async def _mid_call(journal: JournalStore, shop: Shop, saga_id: str, worker: _Worker) -> int:
    """Wait until the call is journaled (INTENT, no outcome) and the tool waits at the pause;
    returns the INTENT's seq."""
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline and worker.proc.poll() is None:
        rows = await journal.read(saga_id)
        running = rows and rows[-1].phase is Phase.INTENT and rows[-1].tool_name == TOOL
        # the pause taken: the tool made its reservation and waits there
        if running and await shop.fault_remaining(PAUSE) == 0:
            return rows[-1].seq
        await asyncio.sleep(0.05)
    raise DevStackError(
        f"{TOOL} never reached the demo's pause (or worker 1 exited); its log: {worker.log}"
    )


async def _call_attempt(
    client: Client, handle: WorkflowHandle[Any, Any], seq: int
) -> tuple[int, str]:
    """The attempt number of the activity that ran the saga's call at ``seq``, and the worker
    that ran it (Temporal records the last attempt's start, with the worker's ``pid@host``).

    A new saga's first call may come twice at one seq: a call that only opened the journal (its
    tool scheduled otherwise than the defaults), then the call that ran the tool: the last."""
    calls: dict[int, bool] = {}  # scheduled event id: whether it is a call at ``seq``
    found = (0, "")
    async for event in handle.fetch_history_events():
        if event.HasField("activity_task_scheduled_event_attributes"):
            scheduled = event.activity_task_scheduled_event_attributes
            if scheduled.activity_type.name in (names.CALL_TOOL, names.OPEN_AND_CALL):
                [request] = await client.data_converter.decode(
                    scheduled.input.payloads, [CallRequest]
                )
                calls[event.event_id] = isinstance(request, CallRequest) and request.seq == seq
        elif event.HasField("activity_task_started_event_attributes"):
            started = event.activity_task_started_event_attributes
            if calls.get(started.scheduled_event_id):
                found = (started.attempt, started.identity)
    return found
