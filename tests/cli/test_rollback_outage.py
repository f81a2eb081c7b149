"""``sagacity saga rollback`` while the journal database is down: without ``--wait`` it exits 3 at
once, one line saying the journal is unreachable and nothing was rolled back (never 1, which says
an undo failed); with ``--wait`` it waits the outage out, a line per wait, and rolls the saga back
once Postgres is back; past ``SAGACITY_OUTAGE_WINDOW`` it exits 3 as well.

The journal lives on a Postgres of this module's own, stopped and started here (the session's is
shared with every test process); the shop and Temporal are the session's. Real servers, the
installed command.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from uuid import uuid4

import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.devstack import DevStack
from sagacity.journal import ROLLBACK, Phase
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.store.databases import ensure_database
from sagacity.store.migrate import migrate
from tests.approvals.conftest import Cli, StartOrder
from tests.conftest import own_postgres
from tests.temporal.conftest import serving
from workflows.order import app as order_app
from workflows.order.shop import Shop

#: how long Postgres stays down while ``rollback --wait`` runs: past the command's start-up
#: (a second or a few on a busy machine) and a few of its waits (1 s, 2 s, 4 s apart)
DOWN_S = 10.0
#: what each of the command's waits for the journal starts with
WAITING = "the journal database is unreachable, trying again in "


@pytest.fixture(scope="module")
async def journal_server(settings: Settings) -> AsyncIterator[DevStack]:
    """An embedded Postgres for this module alone, so that stopping it disturbs no other test."""
    # under the data folder, not pytest's temp root: the wheel opens each parent to its user
    folder = settings.data_dir.expanduser().resolve() / "scratch" / f"rb-{uuid4().hex[:8]}"
    folder.mkdir(parents=True)
    stack = own_postgres(settings, folder)
    try:
        await stack.start()
        yield stack
    finally:
        await stack.stop()
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
async def own_journal(journal_server: DevStack) -> AsyncIterator[JournalStore]:
    """A fresh, migrated journal on that Postgres."""
    url = await ensure_database(journal_server.endpoints.database_url, f"rb_{uuid4().hex[:12]}")
    await migrate(url)
    async with await JournalStore.open(url) as journal:
        yield journal


@pytest.fixture
async def worker(
    temporal_client: Client, task_queue: str, own_journal: JournalStore, shop: Shop
) -> AsyncIterator[Worker]:
    """The Order app's worker journaling on the module's Postgres (``start_order`` starts its
    sagas here)."""
    async with serving(
        temporal_client,
        task_queue,
        journal=own_journal,
        approvals=ApprovalStore(own_journal.pool),
        tools=order_app.TOOLS,
        workflows=order_app.WORKFLOWS,
    ) as served:
        yield served


async def test_an_unreachable_journal_exits_3_and_wait_outlasts_it(
    start_order: StartOrder,
    cli: Cli,
    journal_server: DevStack,
    own_journal: JournalStore,
    shop: Shop,
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test: an operator's terminate")
    journal_env = {"SAGACITY_DATABASE_URL": own_journal.pool.conninfo}
    saga = waiting.saga_id

    await journal_server.stop_postgres()
    try:
        # without --wait: at once, its own exit and one line, never "an undo failed" (1)
        fast = await cli("saga", "rollback", saga, extra_env=journal_env)
        assert fast.code == 3, fast.stderr
        (said,) = fast.stderr.strip().splitlines()
        assert said.startswith(
            "error: the journal database is unreachable: connect to the journal database: "
        ), said
        assert "nothing was rolled back" in said and "--wait" in said

        # --wait gives up past the outage window, with the same exit
        bounded = await cli(
            "saga", "rollback", saga, "--wait",
            extra_env={**journal_env, "SAGACITY_OUTAGE_WINDOW": "2"},
        )  # fmt: skip
        assert bounded.code == 3, bounded.stderr
        lines = bounded.stderr.strip().splitlines()
        assert lines[0].startswith(WAITING), lines
        assert lines[-1].startswith(
            "error: the journal database stayed unreachable for 2 s (SAGACITY_OUTAGE_WINDOW): "
        ), lines

        # --wait within the window: it waits, and goes on once Postgres is back
        waited = asyncio.create_task(
            cli("saga", "rollback", saga, "--wait", "--json", extra_env=journal_env)
        )
        await asyncio.sleep(DOWN_S)
    finally:
        await journal_server.start_postgres()
    done = await waited
    assert done.code == 0, done.stderr
    assert any(line.startswith(WAITING) for line in done.stderr.splitlines()), done.stderr
    compensated = [(u["tool_name"], u["call_seq"]) for u in done.json()["compensated"]]
    assert compensated == [("create_order", 3), ("reserve_inventory", 1)]
    assert (await shop.snapshot()).placed_orders == 0
    # the tries during the outage wrote nothing: one rollback row, then its undos
    rows = await own_journal.read(saga)
    assert [r.tool_name for r in rows].count(ROLLBACK) == 1
    assert [r.phase for r in rows[-2:]] == [Phase.COMPENSATED, Phase.COMPENSATED]
