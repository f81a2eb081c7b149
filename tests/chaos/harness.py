"""Chaos harness: a worker in its own OS process, and a driver that plays the humans.

The worker is ``python -m workers.saga_worker`` (the Order app) or ``python -m tests.chaos.worker``
(the Order app and :mod:`tests.chaos.app`), killed with SIGKILL and started again at will. The driver starts Order sagas and answers them as people would: it approves or
rejects each confirmation as planned, and when a saga stops on a SUSPECT call (a worker died
mid-call), it looks in the shop's tables to see whether the call took effect and says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

import psycopg
from psycopg.rows import dict_row
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import Client, WorkflowHandle
from temporalio.service import RPCError

from sagacity.temporal.models import (
    Approve,
    Reject,
    Resolve,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
)
from workflows.order.workflows import OrderRequest

REPO = Path(__file__).resolve().parents[2]
T = TypeVar("T")

Decision = Literal["approve", "reject"]
APPROVER = "chaos-approver"
RESOLVER = "chaos-resolver"
#: a killed worker's calls are noticed after this long, not the tools' default 30 s
HEARTBEAT_TIMEOUT_S = 2.0


class WorkerProcess:
    """``python -m <module>`` (a worker) in a process of its own, for killing and restarting.

    It reaches Temporal where ``client`` does, or at ``temporal_address`` (a proxy, say).
    """

    def __init__(
        self,
        client: Client,
        *,
        task_queue: str,
        database_url: str,
        log_path: Path,
        temporal_address: str | None = None,
        module: str = "workers.saga_worker",
    ) -> None:
        self.client = client
        self.module = module
        self.task_queue = task_queue
        self.log_path = log_path
        self.kills = 0
        self.starts = 0
        self._proc: subprocess.Popen[bytes] | None = None
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGACITY_", "TEMPORAL_"))}
        # the session's payload codec keys: the worker reads what the test's client writes
        codec = {k: v for k, v in os.environ.items() if k.startswith("SAGACITY_CODEC_KEYS")}
        self._env = {
            **env,
            **codec,
            "SAGACITY_DATABASE_URL": database_url,
            "TEMPORAL_ADDRESS": temporal_address or client.service_client.config.target_host,
            "TEMPORAL_NAMESPACE": client.namespace,
            "SAGACITY_TASK_QUEUE": task_queue,
            "SAGACITY_DATA_DIR": str(log_path.parent),
        }

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    async def start(self, *, timeout: float = 60.0) -> None:
        """Start the process and wait until it polls both its workflow and activity queues."""
        with self.log_path.open("ab") as log:
            log.write(f"--- start {self.starts + 1}\n".encode())
            self._proc = subprocess.Popen(
                [sys.executable, "-m", self.module],
                cwd=REPO,
                env=self._env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not await self._polling():
            if self._proc.poll() is not None:
                raise RuntimeError(f"worker exited with {self._proc.returncode}: {self.log_tail()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker not polling after {timeout:.0f}s: {self.log_tail()}")
            await asyncio.sleep(0.2)

    async def _polling(self) -> bool:
        identity = f"{self.pid}@"
        for kind in (
            TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
            TaskQueueType.TASK_QUEUE_TYPE_ACTIVITY,
        ):
            try:
                described = await self.client.workflow_service.describe_task_queue(
                    DescribeTaskQueueRequest(
                        namespace=self.client.namespace,
                        task_queue=TaskQueue(name=self.task_queue),
                        task_queue_type=kind,
                    ),
                    timeout=timedelta(seconds=2),
                )
            except RPCError:
                return False
            if not any(p.identity.startswith(identity) for p in described.pollers):
                return False
        return True

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flushing, in-flight calls die where they stand."""
        if self._proc is not None and self._proc.poll() is None:
            self._proc.send_signal(signal.SIGKILL)
            self._proc.wait()
            self.kills += 1
        self._proc = None

    def stop(self) -> None:
        """SIGTERM and wait (the worker's graceful shutdown), then make sure it is gone."""
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


async def retrying(call: Callable[[], Awaitable[T]], *, until: float) -> T:
    """``call()`` again while the server is unreachable (a restart), up to the monotonic ``until``."""
    while True:
        try:
            return await call()
        except (RPCError, psycopg.OperationalError):
            if time.monotonic() > until:
                raise
            await asyncio.sleep(0.5)


# -- the humans --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """One saga as the test means to run it."""

    saga_id: str
    product_id: str
    quantity: int
    decision: Decision


@dataclass
class Outcome:
    """How one saga went, as the driver saw it."""

    plan: Plan
    result: SagaResult | None = None
    #: journal seqs of the approval requests the driver decided
    decided: set[int] = field(default_factory=set)
    #: SUSPECT calls the driver resolved: (call seq, tool, happened)
    resolved: list[tuple[int, str, bool]] = field(default_factory=list)
    last_status: SagaStatus | None = None
    error: str | None = None


# What each Order tool leaves in the shop's tables, as the result the tool returns
_EFFECTS = {
    "reserve_inventory": "SELECT id AS reservation_id, product_id, quantity FROM reservations",
    "create_order": "SELECT id AS order_id, product_id, quantity FROM orders",
    "send_confirmation": "SELECT id AS message_id, order_id FROM outbox",
    "book_courier": "SELECT id AS booking_id, order_id FROM courier_bookings",
}


async def effect_of(database_url: str, saga_id: str, tool: str) -> tuple[bool, Any]:
    """Did ``tool`` take effect for ``saga_id``? Read from the shop's tables: (happened, result)."""
    async with await psycopg.AsyncConnection.connect(database_url, row_factory=dict_row) as conn:
        cur = await conn.execute(f"{_EFFECTS[tool]} WHERE saga_id = %s", (saga_id,))
        rows = await cur.fetchall()
    if len(rows) > 1:
        raise AssertionError(f"{saga_id}: {tool} took effect {len(rows)} times")
    return (True, rows[0]) if rows else (False, None)


class Driver:
    """Starts Order sagas and plays their humans until each one ends."""

    def __init__(self, client: Client, *, task_queue: str, database_url: str) -> None:
        self.client = client
        self.task_queue = task_queue
        self.database_url = database_url

    async def run(self, plan: Plan, *, deadline: float) -> Outcome:
        """Run ``plan``'s saga to its end (or the monotonic ``deadline``)."""
        outcome = Outcome(plan)
        request = OrderRequest(
            product_id=plan.product_id,
            quantity=plan.quantity,
            options=SagaOptions(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S),
        )
        handle: WorkflowHandle[Any, SagaResult] = await retrying(
            lambda: self.client.start_workflow(
                "order.PlaceOrder",
                request,
                id=plan.saga_id,
                task_queue=self.task_queue,
                result_type=SagaResult,
            ),
            until=deadline,
        )
        result = asyncio.create_task(retrying(handle.result, until=deadline))
        try:
            while not result.done():
                if time.monotonic() > deadline:
                    outcome.error = "did not finish in time"
                    return outcome
                await self._answer(handle, outcome)
                await asyncio.wait({result}, timeout=0.3)
            outcome.result = result.result()
        except Exception as exc:
            outcome.error = f"{type(exc).__name__}: {exc}"
        finally:
            result.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await result
        return outcome

    async def _answer(self, handle: WorkflowHandle[Any, SagaResult], outcome: Outcome) -> None:
        """Query the saga once; answer a waiting approval or a SUSPECT call."""
        try:
            status: SagaStatus = await handle.query(
                "status", result_type=SagaStatus, rpc_timeout=timedelta(seconds=2)
            )
        except Exception:
            return  # no worker (killed), no server (restarting), or not started yet: ask later
        outcome.last_status = status
        pending, suspect = status.pending_approval, status.suspect
        with contextlib.suppress(RPCError, psycopg.OperationalError):
            if pending is not None and pending.journal_seq not in outcome.decided:
                if outcome.plan.decision == "approve":
                    decision: Approve | Reject = Approve(
                        journal_seq=pending.journal_seq, approver=APPROVER
                    )
                else:
                    decision = Reject(
                        journal_seq=pending.journal_seq, approver=APPROVER, reason="chaos: no"
                    )
                await handle.signal(outcome.plan.decision, decision)
                outcome.decided.add(pending.journal_seq)
            elif status.state is SagaState.SUSPECT and suspect is not None:
                if any(seq == suspect.call_seq for seq, _, _ in outcome.resolved):
                    return
                happened, returned = await effect_of(
                    self.database_url, outcome.plan.saga_id, suspect.tool_name
                )
                await handle.signal(
                    "resolve",
                    Resolve(
                        call_seq=suspect.call_seq,
                        resolver=RESOLVER,
                        happened=happened,
                        result=returned,
                    ),
                )
                outcome.resolved.append((suspect.call_seq, suspect.tool_name, happened))
