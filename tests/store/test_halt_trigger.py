"""The halt gate is in the database: no INTENT row a halt covers goes in, whatever writes it.

A trigger on the journal (schema 0009) refuses the row, so plain SQL typed as the application
role is held like a worker, a halt committed in the middle of racing inserts lets none through
after it, and the application role can neither switch the trigger off nor talk it out of a halt.
Every test runs on a database of its own: a halt of everything there holds nobody else's sagas.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest

from sagacity.devstack import Endpoints
from sagacity.errors import Halted
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, seal
from sagacity.store import JournalStore, Pool, open_pool
from sagacity.store.halts import Halt, HaltScope, HaltStore
from sagacity.store.journal import HALTED_SQLSTATE
from tests.conftest import scratch_database

INSERT = (
    "INSERT INTO public.side_effect_journal"
    " (saga_id, seq, tool_name, phase, input, payload, timestamp, hash)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)


@pytest.fixture
async def db(endpoints: Endpoints) -> AsyncIterator[tuple[str, str]]:
    """(the owner's URL, the application role's URL) of a fresh database."""
    async with scratch_database(endpoints, "sagacity_gate") as urls:
        yield urls


@pytest.fixture
async def halts(db: tuple[str, str]) -> AsyncIterator[HaltStore]:
    """Halts as the operator writes them (the tables' owner)."""
    pool: Pool = await open_pool(db[0], max_size=2)
    try:
        yield HaltStore(pool)
    finally:
        await pool.close()


async def halt(halts: HaltStore, scope: HaltScope) -> Halt:
    return await halts.halt(
        kind="halt",
        scope=scope,
        policy="keep",
        reason="incident",
        operator="olivia",
        signature=None,
    )


def first_row(tool: str = "pay", phase: Phase = Phase.INTENT, saga: str | None = None) -> Entry:
    """A valid first row of a new saga (its hash chained from genesis)."""
    draft = Draft(saga or f"gate-{uuid.uuid4().hex[:10]}", tool, phase, "{}")
    return seal(draft, seq=1, prev_hash=GENESIS_HASH, timestamp=datetime.now(UTC))


async def insert(conn: psycopg.AsyncConnection, row: Entry) -> None:
    """The row, as plain SQL from the application role (no Sagacity statement)."""
    await conn.execute(
        INSERT,
        (
            row.saga_id,
            row.seq,
            row.tool_name,
            row.phase.value,
            row.input,
            row.payload,
            row.timestamp.replace(tzinfo=None),
            row.hash,
        ),
    )


async def count(url: str, saga_id: str) -> int:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT count(*) FROM public.side_effect_journal WHERE saga_id = %s", (saga_id,)
        )
        row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_a_direct_insert_by_the_app_role_is_refused_during_a_halt(
    db: tuple[str, str], halts: HaltStore
) -> None:
    _, app = db
    held = await halt(halts, HaltScope())
    row = first_row()
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            await insert(conn, row)
        assert refused.value.sqlstate == HALTED_SQLSTATE
        assert refused.value.diag.message_detail == str(held.id)
        assert f"halt {held.id} covers this INTENT" in str(refused.value)
        # what is not a call's start goes in: the halt stops new effects, not the record
        await insert(conn, first_row(phase=Phase.EXECUTED))
        assert await count(app, row.saga_id) == 0

        await halts.lift(held.id, by="olivia", reason="fixed", signature=None)
        await insert(conn, row)
    assert await count(app, row.saga_id) == 1


async def test_every_store_path_gets_the_typed_refusal(
    db: tuple[str, str], halts: HaltStore
) -> None:
    _, app = db
    held = await halt(halts, HaltScope(tool="pay"))
    async with await JournalStore.open(app) as journal:
        saga = f"gate-{uuid.uuid4().hex[:10]}"
        for write in (
            lambda: journal.append(Draft(saga, "pay", Phase.INTENT, "{}")),
            lambda: journal.append_at(Draft(saga, "pay", Phase.INTENT, "{}"), seq=1),
            lambda: journal.append_batch_at(
                [Draft(saga, "pay", Phase.INTENT, "{}"), Draft(saga, "pay", Phase.EXECUTED, "{}")],
                seq=1,
            ),
        ):
            with pytest.raises(Halted) as caught:
                await write()
            assert caught.value.halt_id == held.id
        assert await journal.read(saga) == []
        # another tool is not covered
        await journal.append(Draft(saga, "ship", Phase.INTENT, "{}"))


@pytest.mark.parametrize(
    ("said", "covered"),
    [("tq-a", True), ("tq-b", False), (None, True)],
    ids=["its-queue", "another-queue", "no-queue-said"],
)
async def test_a_task_queue_halt_holds_its_queue_and_writers_that_say_none(
    db: tuple[str, str], halts: HaltStore, said: str | None, covered: bool
) -> None:
    _, app = db
    await halt(halts, HaltScope(task_queue="tq-a"))
    async with await JournalStore.open(app) as journal:
        saga = f"gate-{uuid.uuid4().hex[:10]}"
        draft = Draft(saga, "pay", Phase.INTENT, "{}")
        if covered:
            with pytest.raises(Halted):
                await journal.append_at(draft, seq=1, task_queue=said)
        else:
            await journal.append_at(draft, seq=1, task_queue=said)
        assert len(await journal.read(saga)) == (0 if covered else 1)


async def test_a_saga_halt_holds_that_saga_only(db: tuple[str, str], halts: HaltStore) -> None:
    _, app = db
    row, other = first_row(), first_row()
    await halt(halts, HaltScope(sagas=(row.saga_id,)))
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
        with pytest.raises(psycopg.Error, match="covers this INTENT"):
            await insert(conn, row)
        await insert(conn, other)
    assert (await count(app, row.saga_id), await count(app, other.saga_id)) == (0, 1)


@pytest.mark.parametrize(
    "statement",
    [
        "ALTER TABLE public.side_effect_journal DISABLE TRIGGER sagacity_intent_gate",
        "ALTER TABLE public.side_effect_journal DISABLE TRIGGER ALL",
        "DROP TRIGGER sagacity_intent_gate ON public.side_effect_journal",
        "DROP FUNCTION public.sagacity_intent_gate()",
        "CREATE OR REPLACE FUNCTION public.sagacity_intent_gate() RETURNS trigger"
        " LANGUAGE plpgsql AS 'BEGIN RETURN NEW; END'",
        "SET session_replication_role = replica",
    ],
)
async def test_the_app_role_cannot_switch_the_gate_off(db: tuple[str, str], statement: str) -> None:
    _, app = db
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(statement)


async def test_the_app_role_cannot_talk_the_gate_out_of_a_halt(
    db: tuple[str, str], halts: HaltStore
) -> None:
    """Its own schema first on the path, ahead of pg_catalog, with a gate function and an
    operator of its own that find no halt; and a task queue of its choosing: a halt of a tool
    binds the row, whatever the session says."""
    _, app = db
    await halt(halts, HaltScope(tool="pay"))
    row = first_row()
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
        for statement in (
            "CREATE FUNCTION sagacity_halted(text, text, text, boolean DEFAULT false)"
            " RETURNS bigint LANGUAGE sql AS 'SELECT NULL::bigint'",
            "CREATE FUNCTION never(jsonb, text) RETURNS boolean LANGUAGE sql AS 'SELECT false'",
            "CREATE OPERATOR ? (LEFTARG = jsonb, RIGHTARG = text, FUNCTION = never)",
            "SET search_path = sagacity_app, pg_catalog, public",
            "SELECT pg_catalog.set_config('sagacity.task_queue', 'elsewhere', false)",
        ):
            await conn.execute(statement)
        with pytest.raises(psycopg.Error, match="covers this INTENT"):
            await insert(conn, row)
    assert await count(app, row.saga_id) == 0


async def test_a_snapshot_older_than_the_halt_is_refused(
    db: tuple[str, str], halts: HaltStore
) -> None:
    """A REPEATABLE READ transaction reads the gate as it was at its first statement: its INTENT
    after a halt committed is refused as a serialization failure, not let in."""
    _, app = db
    row = first_row()
    async with await psycopg.AsyncConnection.connect(app) as conn:
        await conn.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
        await conn.execute("SELECT count(*) FROM public.sagacity_halt_gate")  # the snapshot
        await halt(halts, HaltScope())
        with pytest.raises(psycopg.errors.SerializationFailure):
            await insert(conn, row)
        await conn.rollback()
        # a new snapshot sees the halt
        with pytest.raises(psycopg.Error, match="covers this INTENT"):
            await insert(conn, row)
        await conn.rollback()
    assert await count(app, row.saga_id) == 0


async def test_no_intent_commits_after_a_halt_that_races_it(
    db: tuple[str, str], halts: HaltStore
) -> None:
    """Eight writers insert INTENTs as fast as they can (plain SQL, and the store as workers
    write) while the halt is written. Every INTENT in the journal committed before the halt
    did: a snapshot taken once the halt returned sees them all."""
    owner, app = db
    stop = asyncio.Event()
    written: list[str] = []
    refused_after: list[str] = []
    halted_at: list[float] = []
    loop = asyncio.get_running_loop()

    async def plain_sql() -> None:
        async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
            while not stop.is_set():
                row = first_row()
                started = loop.time()
                try:
                    await insert(conn, row)
                    written.append(row.saga_id)
                except psycopg.Error as exc:
                    assert exc.sqlstate == HALTED_SQLSTATE, exc
                    refused_after.append(row.saga_id)
                if halted_at and started > halted_at[0]:
                    assert row.saga_id not in written, "an INTENT began after the halt and went in"

    async def store(journal: JournalStore) -> None:
        while not stop.is_set():
            saga = f"gate-{uuid.uuid4().hex[:10]}"
            try:
                await journal.append_at(
                    Draft(saga, "pay", Phase.INTENT, "{}"), seq=1, task_queue="tq"
                )
                written.append(saga)
            except Halted:
                refused_after.append(saga)

    async with await JournalStore.open(app, max_size=4) as journal:
        writers = [asyncio.create_task(plain_sql()) for _ in range(4)]
        writers += [asyncio.create_task(store(journal)) for _ in range(4)]
        await asyncio.sleep(0.5)
        await halt(halts, HaltScope())
        halted_at.append(loop.time())
        async with await psycopg.AsyncConnection.connect(owner) as snap:
            await snap.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
            cur = await snap.execute(
                "SELECT saga_id FROM public.side_effect_journal WHERE phase = 'INTENT'"
            )
            before_halt = {r[0] for r in await cur.fetchall()}
            await asyncio.sleep(0.5)
            stop.set()
            await asyncio.gather(*writers)
            await snap.rollback()
    assert written and refused_after, (len(written), len(refused_after))
    late = set(written) - before_halt
    assert not late, f"{len(late)} INTENTs committed after the halt, e.g. {sorted(late)[:3]}"
