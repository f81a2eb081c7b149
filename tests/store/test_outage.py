"""Pools survive a Postgres restart or outage: no dead connection is handed out after it, typed
errors during it, and the pool keeps trying however long it lasts.

These tests stop and start Postgres, so they use one of their own (like tests/chaos): the
session's embedded server is shared with every other test process started from this checkout,
and a restart would break their connections too.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from time import monotonic
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool

from sagacity.devstack import DevStack, PostgresStopMode
from sagacity.errors import StoreUnavailable
from sagacity.journal import Draft, Phase
from sagacity.settings import Settings
from sagacity.store import JournalStore, Pool, open_pool
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.db import translate_errors
from sagacity.store.migrate import migrate
from tests.conftest import own_postgres
from workflows.order.shop import SEED, Shop

#: How long the long outage lasts: longer than a pool's wait for a connection (10 s), and between
#: two of psycopg_pool's default reconnection attempts (about 15 s and 31 s after the first), so
#: that a pool relying on them would still be waiting when the server is back.
OUTAGE_S = 20.0


@pytest.fixture(scope="module")
def outage_dir(settings: Settings) -> Iterator[Path]:
    # under the repository's data folder, as in tests/chaos: the Postgres wheel opens every
    # parent of its cluster folder to its system user
    path = settings.data_dir.expanduser().resolve() / "scratch" / f"outage-{uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
async def pg(settings: Settings, outage_dir: Path) -> AsyncIterator[DevStack]:
    """A private embedded Postgres (no Temporal): these tests may restart it at will."""
    stack = own_postgres(settings, outage_dir)
    await stack.start()
    try:
        yield stack
    finally:
        await stack.stop()


@pytest.fixture
async def database(pg: DevStack) -> AsyncIterator[str]:
    server = pg.endpoints.database_url
    name = f"outage_{uuid4().hex[:12]}"
    url = await ensure_database(server, name)
    await migrate(url)
    yield url
    await drop_database(server, name)


@pytest.fixture
async def journal_pool(database: str) -> AsyncIterator[Pool]:
    """A pool from :func:`open_pool` with its defaults, as a worker opens it."""
    pool = await open_pool(database)
    try:
        yield pool
    finally:
        await pool.close()


@pytest.fixture
def journal(journal_pool: Pool) -> JournalStore:
    return JournalStore(journal_pool)


@pytest.fixture
async def shop(database: str) -> AsyncIterator[Shop]:
    shop = await Shop.open(database)
    try:
        await shop.setup()
        yield shop
    finally:
        await shop.close()


@asynccontextmanager
async def postgres_down(pg: DevStack, mode: PostgresStopMode) -> AsyncIterator[None]:
    """Postgres is stopped inside the block, and running again after it, whatever happens."""
    await pg.stop_postgres(mode=mode)
    try:
        yield
    finally:
        await pg.start_postgres()


async def fill(pool: AsyncConnectionPool[Any], n: int) -> None:
    """Leave ``n`` idle connections in ``pool``: after a restart, every one of them is dead."""
    conns = [await pool.getconn() for _ in range(n)]
    for conn in conns:
        await pool.putconn(conn)
    assert pool.get_stats()["pool_available"] >= n


def intent(saga_id: str) -> Draft:
    return Draft(saga_id, "charge_card", Phase.INTENT, input='{"n": 1}')


def new_saga() -> str:
    return f"saga-{uuid4().hex[:12]}"


@pytest.mark.parametrize("mode", ["fast", "immediate"])
async def test_first_calls_after_a_restart_succeed(
    pg: DevStack, journal_pool: Pool, journal: JournalStore, shop: Shop, mode: PostgresStopMode
) -> None:
    saga_id = new_saga()
    await journal.append(intent(saga_id))
    await fill(journal_pool, 5)
    await fill(shop.pool, 5)

    async with postgres_down(pg, mode):  # fast: a clean shutdown; immediate: like a crash
        pass

    began = monotonic()
    second = await journal.append(intent(saga_id))
    snapshot = await shop.snapshot()
    took = monotonic() - began

    assert second.seq == 2
    assert snapshot.available == {product: stock for product, (_, stock) in SEED.items()}
    # each waited for no backoff: a dead connection is checked, dropped, and a fresh one made
    assert took < 2.0, f"the first calls after the restart took {took:.1f}s"


async def test_connection_broken_mid_use_is_discarded(
    pg: DevStack, journal_pool: Pool, journal: JournalStore
) -> None:
    running = asyncio.Event()

    async def long_query() -> None:
        with translate_errors("sleep in the database"):
            async with journal_pool.connection() as conn:
                running.set()
                await conn.execute("SELECT pg_sleep(60)")

    task = asyncio.create_task(long_query())
    await running.wait()
    await asyncio.sleep(0.3)  # the query is on the server
    async with postgres_down(pg, "fast"):  # a fast shutdown ends the query with AdminShutdown
        with pytest.raises(StoreUnavailable):
            await task

    assert journal_pool.get_stats().get("returns_bad", 0) >= 1, "the broken connection went back"
    assert (await journal.append(intent(new_saga()))).seq == 1


async def test_pools_wait_out_an_outage(
    pg: DevStack, journal_pool: Pool, journal: JournalStore, shop: Shop
) -> None:
    saga_id = new_saga()
    await fill(journal_pool, 3)
    await fill(shop.pool, 3)

    began = monotonic()
    async with postgres_down(pg, "fast"):
        with pytest.raises(StoreUnavailable) as caught:
            await journal.append(intent(saga_id))
        # typed, and saying why: the pool found no server
        assert isinstance(caught.value.__cause__, psycopg.OperationalError)
        with pytest.raises(psycopg.OperationalError):
            async with shop.pool.connection(timeout=2.0) as conn:
                await conn.execute("SELECT 1")
        await asyncio.sleep(max(0.0, OUTAGE_S - (monotonic() - began)))

    assert not journal_pool.closed and not shop.pool.closed
    back = monotonic()
    entry = await journal.append(intent(saga_id))
    snapshot = await shop.snapshot()
    took = monotonic() - back

    # the append that failed during the outage wrote nothing: this one is the saga's first row
    assert entry.seq == 1
    assert await journal.read(saga_id) == [entry]
    assert snapshot.available == {product: stock for product, (_, stock) in SEED.items()}
    # the pools never stopped trying: at most a retry interval (2 s) after the server was back
    assert took < 5.0, f"the first calls after a {OUTAGE_S:.0f}s outage took {took:.1f}s"
