"""Fixtures for approval tests: the saga fixtures of ``tests/temporal``, the service, the CLI,
sagas with a SUSPECT call (a worker process killed mid-call), and the API serving as the codec
server of the ``temporal`` CLI.

Everything runs against the session's real Temporal server and Postgres.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.approvals import ApprovalService
from sagacity.approvals.codec_server import CodecServer
from sagacity.approvals.http import create_app
from sagacity.devstack import Endpoints
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaState, SagaStatus
from tests.serving import serve
from tests.temporal import conftest as saga_fixtures
from tests.temporal.conftest import (
    awaiting_approval,
    forget_killed_worker,
    intent_written,
    wait_for,
)
from tests.temporal.test_crash import OPTIONS, WorkerProcess
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

# the saga tests' fixtures, shared by name: the journal, the shop, an in-process worker
pool = saga_fixtures.pool
journal = saga_fixtures.journal
approvals = saga_fixtures.approvals
shop_session = saga_fixtures.shop_session
shop = saga_fixtures.shop
worker = saga_fixtures.worker

START = {"p-1": 10, "p-2": 25}

#: the steps before the gate write rows 1-4; the gate's AWAITING_APPROVAL is row 5
GATE_SEQ = 5


@dataclass
class Waiting:
    """An Order saga stopped at its approval gate."""

    saga_id: str
    handle: WorkflowHandle[Any, SagaResult]
    status: SagaStatus

    @property
    def seq(self) -> int:
        assert self.status.pending_approval is not None
        return self.status.pending_approval.journal_seq


StartOrder = Callable[..., Coroutine[Any, Any, Waiting]]


@pytest.fixture
def start_order(temporal_client: Client, worker: Worker) -> StartOrder:
    """Start an Order saga on the test's worker and return it once it waits for approval."""

    async def start(options: SagaOptions | None = None, *, quantity: int = 2) -> Waiting:
        saga_id = f"order-{uuid.uuid4().hex[:8]}"
        request = OrderRequest(quantity=quantity, options=options or SagaOptions())
        handle = await temporal_client.start_workflow(
            "order.PlaceOrder",
            request,
            id=saga_id,
            task_queue=worker.task_queue,
            result_type=SagaResult,
        )
        status = await wait_for(handle, awaiting_approval)
        return Waiting(saga_id, handle, status)

    return start


@pytest.fixture
def service(temporal_client: Client, approvals: ApprovalStore) -> ApprovalService:
    return ApprovalService(temporal_client, approvals)


@dataclass
class Suspect:
    """An Order saga stopped at a SUSPECT ``create_order`` call (its INTENT is at ``seq``)."""

    saga_id: str
    handle: WorkflowHandle[Any, SagaResult]
    status: SagaStatus

    @property
    def seq(self) -> int:
        assert self.status.suspect is not None
        return self.status.suspect.call_seq


MakeSuspects = Callable[[int], Coroutine[Any, Any, list[Suspect]]]


@pytest.fixture
async def make_suspects(
    temporal_client: Client,
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    tmp_path: Path,
) -> AsyncIterator[MakeSuspects]:
    """Make ``count`` SUSPECT sagas the way a crash does (``tests/temporal/test_crash.py``).

    Each Order saga's ``create_order`` stalls before any effect, the worker process running them
    is killed with SIGKILL, and a new one finds INTENT rows with no outcome of a tool that is not
    idempotent: SUSPECT, until a human says. The new worker keeps serving the task queue.
    """
    process = WorkerProcess(endpoints, database_url, task_queue, tmp_path / "worker.log")
    await process.start()

    async def make(count: int) -> list[Suspect]:
        await shop.arm_fault("create_order", "", times=count, delay_s=60)
        handles = []
        for _ in range(count):
            saga_id = f"suspect-{uuid.uuid4().hex[:8]}"
            handles.append(
                await temporal_client.start_workflow(
                    "order.PlaceOrder",
                    OrderRequest(options=OPTIONS),
                    id=saga_id,
                    task_queue=task_queue,
                    result_type=SagaResult,
                )
            )
        for handle in handles:
            await intent_written(journal, handle.id, "create_order")
        process.kill()
        await forget_killed_worker(temporal_client, *(handle.id for handle in handles))
        await process.start()
        return [
            Suspect(
                handle.id,
                handle,
                await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60),
            )
            for handle in handles
        ]

    try:
        yield make
    finally:
        process.stop()


@dataclass
class CliResult:
    code: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


Cli = Callable[..., Coroutine[Any, Any, CliResult]]


@pytest.fixture
def cli(endpoints: Endpoints, database_url: str) -> Cli:
    """Run the installed ``sagacity`` command in a child process against the test servers."""
    env = {
        **os.environ,
        "SAGACITY_DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": endpoints.temporal_address,
        "TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
        "COLUMNS": "200",
    }

    async def run(*args: str, extra_env: dict[str, str] | None = None) -> CliResult:
        proc = await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("sagacity")),
            *args,
            env={**env, **(extra_env or {})},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), timeout=60)
        assert proc.returncode is not None
        return CliResult(proc.returncode, out.decode(), err.decode())

    return run


#: the codec server's callers: alice may decode, bob holds a token but may not
CODEC_TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


@contextlib.asynccontextmanager
async def codec_server(temporal_client: Client, approvals: ApprovalStore) -> AsyncIterator[str]:
    """``sagacity approvals serve``'s app under uvicorn with the session's codec; its base URL."""
    codec = temporal_client.data_converter.payload_codec
    assert codec is not None, "the test session runs with the codec on"
    app = create_app(
        ApprovalService(temporal_client, approvals),
        CODEC_TOKENS,
        codec=CodecServer(codec, decoders=frozenset({"alice"})),
    )
    async with serve(app) as url:
        yield url
