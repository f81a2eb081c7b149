"""Two attempts of one approved IRREVERSIBLE call overlap; the email goes out once.

Found through the Postgres-restart chaos run (in-flight calls went SUSPECT although no tool had
run), reproduced here deterministically. ``call_tool`` heartbeats only around the tool itself,
not while it writes INTENT. When that write waits longer than the heartbeat timeout (a database
outage, a lock), Temporal times the attempt out and starts another while the first still runs.
The second finds no INTENT (``_resume`` reads none: the first has not written it yet) and writes
INTENT itself; ``append_at`` returns an identical existing row as if it had written it, so each
attempt takes the row as its own and both run the tool. The late attempt is cancelled only when
its next heartbeat is refused, which comes after a fast tool has already acted (without the
partition below this test fails the same way, just not by construction); in the chaos run a
slower tool was cancelled mid-call instead, leaving the SUSPECT calls.

The fix: ``call_tool`` heartbeats from its start, and writes INTENT exclusively: the attempt
whose insert finds the row already there does not run the tool (it resumes as a retry would:
the outcome row, or SUSPECT for a human).

Here: a row lock holds the INTENT insert of ``send_confirmation``; the first worker's link to
Temporal is cut (a proxy), so nothing cancels it; a second worker gets the retry; the lock goes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest
from temporalio.client import Client

from sagacity.journal import GENESIS_HASH
from sagacity.temporal.models import Approve, SagaOptions
from tests.chaos.harness import APPROVER, HEARTBEAT_TIMEOUT_S, WorkerProcess
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

pytestmark = pytest.mark.chaos


class Proxy:
    """A TCP relay to ``target`` that can be cut: a network partition for one worker."""

    def __init__(self, target: str) -> None:
        host, port = target.rsplit(":", 1)
        self._target = (host, int(port))
        self._links: set[asyncio.StreamWriter] = set()
        self._cut = False
        self._server: asyncio.Server | None = None

    async def start(self) -> str:
        """Start relaying; returns the address to use instead of ``target``."""
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    def cut(self) -> None:
        """Drop every link and refuse new ones."""
        self._cut = True
        for writer in self._links:
            writer.transport.abort()

    async def close(self) -> None:
        self.cut()
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._cut:
            writer.transport.abort()
            return
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        self._links |= {writer, up_writer}

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            dst.transport.abort()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))


@contextlib.asynccontextmanager
async def row_lock(database_url: str, saga_id: str, seq: int) -> AsyncIterator[None]:
    """Hold an uncommitted row at (saga_id, seq): inserts there wait until the block ends."""
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        await conn.execute(
            "INSERT INTO side_effect_journal "
            "(saga_id, seq, tool_name, phase, input, payload, timestamp, hash) "
            "VALUES (%s, %s, 'lock', 'INTENT', '', '', now(), %s)",
            (saga_id, seq, GENESIS_HASH),
        )
        try:
            yield
        finally:
            await conn.rollback()


async def until_waiting(database_url: str, inserts: int, timeout: float = 60.0) -> None:
    """Wait until ``inserts`` journal inserts wait on a lock."""
    deadline = time.monotonic() + timeout
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        while True:
            row = await (
                await conn.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' "
                    "AND query LIKE '%%INSERT INTO %%side_effect_journal%%'"
                )
            ).fetchone()
            if row is not None and row[0] >= inserts:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{inserts} journal inserts never waited on the lock")
            await asyncio.sleep(0.2)


async def test_an_approved_irreversible_call_runs_once_when_attempts_overlap(
    chaos_client: Client, chaos_database: str, chaos_dir: Path
) -> None:
    shop = await Shop.open(chaos_database)
    await shop.setup(reset=True)
    await shop.close()
    task_queue = f"overlap-{uuid4().hex[:8]}"
    saga_id = f"overlap-{uuid4().hex[:8]}"
    target = chaos_client.service_client.config.target_host

    proxy = Proxy(target)
    proxied = await proxy.start()
    try:
        first = WorkerProcess(
            chaos_client,
            task_queue=task_queue,
            database_url=chaos_database,
            log_path=chaos_dir / "overlap-first.log",
            temporal_address=proxied,
        )
        second = WorkerProcess(
            chaos_client,
            task_queue=task_queue,
            database_url=chaos_database,
            log_path=chaos_dir / "overlap-second.log",
        )
        await first.start()
        handle = await chaos_client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(options=SagaOptions(heartbeat_timeout_s=HEARTBEAT_TIMEOUT_S)),
            id=saga_id,
            task_queue=task_queue,
        )
        try:
            waiting = await wait_for(handle, awaiting_approval)
            assert waiting.pending_approval is not None
            request_seq = waiting.pending_approval.journal_seq
            # AWAITING_APPROVAL at request_seq, APPROVED next, then the call's INTENT
            async with row_lock(chaos_database, saga_id, request_seq + 2):
                await handle.signal("approve", Approve(journal_seq=request_seq, approver=APPROVER))
                await until_waiting(chaos_database, 1)
                # the first attempt waits on the lock; now it cannot hear from Temporal either
                proxy.cut()
                await second.start()
                # the retry, after the heartbeat timeout, waits on the lock too
                await until_waiting(chaos_database, 2)
            await asyncio.sleep(3)  # both attempts go on from INTENT
            async with await psycopg.AsyncConnection.connect(chaos_database) as conn:
                sent = await (
                    await conn.execute("SELECT count(*) FROM outbox WHERE saga_id = %s", (saga_id,))
                ).fetchone()
            assert sent == (1,), f"{sent[0] if sent else '?'} confirmations sent for one approval"
        finally:
            first.kill()
            second.stop()
            with contextlib.suppress(Exception):
                await handle.terminate("test over")
    finally:
        await proxy.close()
