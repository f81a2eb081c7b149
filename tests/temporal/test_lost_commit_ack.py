"""A call whose INTENT commits but whose commit's answer is lost (the connection dies between
the commit and the reply): the attempt writes INTENT again, finds the row it sent, takes it as
its own and runs the tool once; it is not SUSPECT.

The activity runs in Temporal's ActivityEnvironment; its journal is reached through a relay that
drops the reply to the first statement sent after it is armed (the INTENT insert: the server
answers only after the commit, so the row is in) and cuts that connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from temporalio.testing import ActivityEnvironment

from sagacity import compensable
from sagacity.journal import GENESIS_HASH, Phase
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.activities import SagaActivities
from sagacity.temporal.models import CallOutcome, CallRequest, CallStatus, SagaOpen
from sagacity.temporal.waits import OUTAGE_ALLOWANCE
from sagacity.tools import ToolRegistry

SENT: list[str] = []


async def _unsend(ctx: object) -> None:
    """Nothing to take back in this test."""


@compensable(by=_unsend)
async def send_letter(to: str) -> dict[str, str]:
    """Send a letter (not idempotent: a retry after INTENT without an outcome is SUSPECT)."""
    SENT.append(to)
    return {"sent": to}


class AckLosingRelay:
    """A TCP relay to Postgres; armed, it drops the next reply the server sends and cuts the
    link that reply was for, after the server has done (and committed) what it answers."""

    def __init__(self, host: str, port: int) -> None:
        self._target = (host, port)
        self._armed = False
        self.lost = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._relay, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    def arm(self) -> None:
        self._armed = True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in self._tasks:
            task.cancel()

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._target)
        sent_armed = False

        async def upstream() -> None:
            nonlocal sent_armed
            with contextlib.suppress(ConnectionError):
                while data := await reader.read(65536):
                    if self._armed:
                        self._armed, sent_armed = False, True
                    up_writer.write(data)
                    await up_writer.drain()
            up_writer.transport.abort()

        async def downstream() -> None:
            with contextlib.suppress(ConnectionError):
                while data := await up_reader.read(65536):
                    if sent_armed:
                        self.lost += 1
                        break  # the reply never reaches the client
                    writer.write(data)
                    await writer.drain()
            writer.transport.abort()
            up_writer.transport.abort()

        tasks = {asyncio.create_task(upstream()), asyncio.create_task(downstream())}
        self._tasks |= tasks
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.gather(*tasks)
        finally:
            # aborted transports still need their writers closed (else: ResourceWarning)
            for end in (writer, up_writer):
                end.close()


@pytest.fixture
async def relayed(database_url: str) -> AsyncIterator[tuple[AckLosingRelay, str]]:
    params = conninfo_to_dict(database_url)
    host = str(params.get("host") or "")
    if not host or host.startswith("/"):
        pytest.skip("the journal database is reached over a socket file, not TCP")
    relay = AckLosingRelay(host, int(params.get("port") or 5432))
    port = await relay.start()
    try:
        yield relay, make_conninfo(database_url, host="127.0.0.1", port=port)
    finally:
        await relay.close()


async def call_through(
    url: str, tool: Any, to: str, *, arm: AckLosingRelay | None
) -> tuple[str, CallOutcome]:
    """Run one call of ``tool`` (to ``to``) at seq 1 of a new saga over the relay at ``url``,
    arming the relay first when ``arm`` is given: the saga id and the call's outcome."""
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        acts = SagaActivities(JournalStore(pool), ApprovalStore(pool), ToolRegistry([tool]))
        saga_id = f"lost-ack-{uuid.uuid4().hex[:8]}"
        request = CallRequest(
            saga_id=saga_id, seq=1, prev_hash=GENESIS_HASH, tool_name=tool.name, args={"to": to}
        )
        if arm is not None:
            arm.arm()
        return saga_id, await ActivityEnvironment().run(acts.call_tool, request)
    finally:
        await pool.close()


async def test_a_lost_commit_ack_on_intent_is_not_a_suspect_call(
    relayed: tuple[AckLosingRelay, str], journal: JournalStore
) -> None:
    relay, url = relayed
    SENT.clear()
    saga_id, outcome = await call_through(url, send_letter, "x", arm=relay)
    assert relay.lost == 1  # the INTENT's answer was lost, after its commit
    assert outcome.status is CallStatus.EXECUTED
    assert SENT == ["x"]  # run once
    rows = await journal.read(saga_id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED]


RELAY: list[AckLosingRelay] = []


async def _unpost(ctx: object) -> None:
    """Nothing to take back in this test."""


@compensable(by=_unpost)
async def post_letter(to: str) -> dict[str, str]:
    """Post a letter, then lose the answer to whatever the journal is sent next (its outcome)."""
    SENT.append(to)
    RELAY[0].arm()
    return {"posted": to}


async def test_a_lost_commit_ack_on_the_outcome_row_is_not_a_second_run(
    relayed: tuple[AckLosingRelay, str], journal: JournalStore
) -> None:
    """The EXECUTED row commits, its answer is lost: the write is tried again, finds its row,
    and the call is EXECUTED once (not SUSPECT, not run again)."""
    relay, url = relayed
    SENT.clear()
    RELAY[:] = [relay]
    try:
        saga_id, outcome = await call_through(url, post_letter, "y", arm=None)
    finally:
        RELAY.clear()
    assert relay.lost == 1  # the outcome's answer was lost, after its commit
    assert outcome.status is CallStatus.EXECUTED
    assert SENT == ["y"]
    rows = await journal.read(saga_id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED]


async def test_a_lost_commit_ack_on_the_opening_claim_and_intent_is_not_a_suspect_call(
    relayed: tuple[AckLosingRelay, str], journal: JournalStore
) -> None:
    """A new saga's first call claims the journal and writes INTENT in one statement; its
    answer is lost after the commit: the try after it finds the claim and its own INTENT, and
    the call runs once."""
    relay, url = relayed
    SENT.clear()
    pool = await open_pool(url, min_size=1, max_size=2)
    try:
        acts = SagaActivities(JournalStore(pool), ApprovalStore(pool), ToolRegistry([send_letter]))
        saga_id = f"lost-ack-open-{uuid.uuid4().hex[:8]}"
        opening = SagaOpen(saga_id=saga_id, workflow_id=saga_id, first_run_id="run-1")
        request = CallRequest(
            saga_id=saga_id,
            seq=1,
            prev_hash=GENESIS_HASH,
            tool_name=send_letter.name,
            args={"to": "z"},
            opening=opening,
        )
        env = ActivityEnvironment()
        # scheduled as the tool's spec schedules a call: the call goes on in this activity
        options = send_letter.options
        env.info = dataclasses.replace(
            env.info,
            heartbeat_timeout=options.heartbeat_timeout,
            start_to_close_timeout=options.timeout + OUTAGE_ALLOWANCE,
        )
        relay.arm()
        outcome = await env.run(acts.open_and_call, request)
    finally:
        await pool.close()
    assert relay.lost == 1  # the answer to the claim and INTENT was lost, after their commit
    assert outcome.status is CallStatus.EXECUTED and outcome.opened is not None
    assert SENT == ["z"]  # run once
    rows = await journal.read(saga_id)
    assert [r.phase for r in rows] == [Phase.INTENT, Phase.EXECUTED]
    assert (await journal.chains([saga_id]))[saga_id] == (saga_id, "run-1")
