"""The writer stays in the journal: a table the app role names like Sagacity's gets no row.

The app role may create tables in a schema of its own, first on its search path (the Order
example keeps its shop there). Every Sagacity statement names the journal's schema, so a
``side_effect_journal`` it makes there (a shadow) is written by nobody, and workers refuse to
start while one exists. Each test runs on a fresh database and on one migrated by the
migrations before this rule (0001-0007) and then upgraded.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.errors import Halted, SettingsError, StoreUnavailable
from sagacity.journal import Draft, Phase
from sagacity.settings import Settings
from sagacity.store import (
    ApprovalStore,
    JournalStore,
    apply_grants,
    migrate,
    open_pool,
    provision,
)
from sagacity.store.databases import drop_database, ensure_database, with_user
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.store.migrate import migrations, unapplied
from sagacity.store.roles import placement
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import check_journal_rights
from tests.temporal import sample_tools
from tests.temporal.conftest import serving

REAL = "public.side_effect_journal"
SHADOW = "sagacity_app.side_effect_journal"

# What the app login runs to leave the journal: bare names, so they land in its own schema.
SHADOWS_BY_APP = [
    "CREATE TABLE side_effect_journal (LIKE public.side_effect_journal INCLUDING ALL)",
    "CREATE TABLE sagacity_halt_gate (LIKE public.sagacity_halt_gate INCLUDING ALL)",
    "INSERT INTO sagacity_halt_gate (id, halts) VALUES (1, '[]')",
    "CREATE FUNCTION sagacity_halted(text, text, text, boolean DEFAULT false) RETURNS bigint"
    " LANGUAGE sql AS 'SELECT NULL::bigint'",
]
# The same, made by the owner in the app's schema and handed to the app.
SHADOWS_BY_OWNER = [
    f"CREATE TABLE {SHADOW} (LIKE public.side_effect_journal INCLUDING ALL)",
    f"GRANT SELECT, INSERT, UPDATE, DELETE ON {SHADOW} TO sagacity_app",
]


async def _previous_migrations(owner: str) -> None:
    """Set the database up as the migrator before this rule did: 0001-0007, bare names."""
    async with await psycopg.AsyncConnection.connect(owner, autocommit=True) as conn:
        await conn.execute(
            "CREATE TABLE sagacity_schema_version (version TEXT PRIMARY KEY,"
            " applied_at TIMESTAMP NOT NULL DEFAULT (now() AT TIME ZONE 'UTC'))"
        )
        for version, script in migrations():
            if version < "0008":
                await conn.execute(script)
                await conn.execute(
                    "INSERT INTO sagacity_schema_version (version) VALUES (%s)", (version,)
                )


@pytest.fixture(params=["fresh", "upgraded"])
async def db(
    request: pytest.FixtureRequest, endpoints: Endpoints
) -> AsyncIterator[tuple[str, str]]:
    """(the owner's URL, the app login's URL) of a new database, fresh or upgraded."""
    name = f"sagacity_schema_{uuid.uuid4().hex[:12]}"
    owner = await ensure_database(endpoints.database_url, name)
    try:
        if request.param == "upgraded":
            await _previous_migrations(owner)
            assert await migrate(owner) == [v for v, _ in migrations() if v >= "0008"]
        yield owner, await provision(owner)
    finally:
        await drop_database(endpoints.database_url, name)


async def _run(url: str, *statements: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for statement in statements:
            await conn.execute(statement)


async def _count(owner: str, table: str) -> int:
    async with await psycopg.AsyncConnection.connect(owner, autocommit=True) as conn:
        row = await (await conn.execute(f"SELECT count(*) FROM {table}")).fetchone()
    assert row is not None
    return int(row[0])


async def test_the_app_login_may_create_nothing_in_the_journals_schema(
    db: tuple[str, str],
) -> None:
    _, app = db
    for statement in [
        "CREATE TABLE public.sagacity_tlog_extra (id int)",
        "CREATE TABLE public.journal_copy (LIKE public.side_effect_journal)",
        "CREATE FUNCTION public.sagacity_halted(text) RETURNS bigint LANGUAGE sql AS 'SELECT 1'",
    ]:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await _run(app, statement)
    found = await placement(app)
    assert (found.role, found.schema, found.creators, found.shadows) == (
        "sagacity_app",
        "public",
        [],
        [],
    )


@pytest.mark.parametrize("maker", ["app", "owner"])
async def test_a_shadow_gets_no_row_and_workers_refuse_to_start(
    db: tuple[str, str], maker: str, settings: Settings
) -> None:
    owner, app = db
    saga = f"shadow-{uuid.uuid4().hex[:8]}"
    async with await JournalStore.open(app) as running:  # a worker's store, opened before
        if maker == "app":
            await _run(app, *SHADOWS_BY_APP)
        else:
            await _run(owner, *SHADOWS_BY_OWNER)
        # the app's own session now reads the shadow when it names the journal bare
        async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
            row = await (
                await conn.execute("SELECT 'side_effect_journal'::regclass::text")
            ).fetchone()
        assert row == ("side_effect_journal",) and await _count(owner, SHADOW) == 0
        for n in range(3):
            await running.append(Draft(saga, "pay", Phase.INTENT, f'{{"n": {n}}}'))
        async with await JournalStore.open(app) as fresh:  # opened with the shadow there
            await fresh.append(Draft(saga, "pay", Phase.EXECUTED, "{}"))
            assert (await fresh.verify(saga)).ok and len(await fresh.read(saga)) == 4
    assert await _count(owner, REAL) == 4
    assert await _count(owner, SHADOW) == 0

    shadows = [s.name for s in (await placement(app)).shadows]
    assert SHADOW in shadows
    with pytest.raises(SettingsError, match=r"DROP TABLE sagacity_app\.side_effect_journal"):
        await check_journal_rights(settings, app)
    if maker == "app":  # the owner's tools (`sagacity halt`) still find the owner's tables
        owner_pool = await open_pool(owner, max_size=1)
        try:
            assert len(await JournalStore(owner_pool).read(saga)) == 4
        finally:
            await owner_pool.close()
    else:  # two copies of the owner's: it says so rather than guess
        with pytest.raises(StoreUnavailable, match="more than one schema"):
            await open_pool(owner)

    await _run(owner, f"DROP TABLE {SHADOW}")
    if maker == "app":
        await _run(
            owner,
            "DROP TABLE sagacity_app.sagacity_halt_gate",
            "DROP FUNCTION sagacity_app.sagacity_halted(text, text, text, boolean)",
        )
    await check_journal_rights(settings, app)  # clean again: the worker starts


async def test_a_halt_holds_with_a_shadow_gate_and_function(db: tuple[str, str]) -> None:
    owner, app = db
    owner_pool = await open_pool(owner, max_size=1)
    try:
        halt = await HaltStore(owner_pool).halt(
            kind="halt",
            scope=HaltScope(tool="pay"),
            policy="keep",
            reason="incident 42",
            operator="olivia",
            signature=None,
        )
    finally:
        await owner_pool.close()
    await _run(app, *SHADOWS_BY_APP)  # an empty gate, and a function that finds no halt
    saga = f"halted-{uuid.uuid4().hex[:8]}"
    async with await JournalStore.open(app) as journal:
        with pytest.raises(Halted):
            await journal.append_at(Draft(saga, "pay", Phase.INTENT, "{}"), seq=1, task_queue="tq")
        assert await HaltStore(journal.pool).enforced() == {halt.id}
    assert await _count(owner, REAL) == 0


async def test_a_saga_run_by_a_worker_lands_in_the_journal(
    db: tuple[str, str], temporal_client: Client, task_queue: str
) -> None:
    owner, app = db
    await _run(app, *SHADOWS_BY_APP)  # there before the worker starts
    pool = await open_pool(app, max_size=4)
    try:
        journal = JournalStore(pool)
        async with serving(
            temporal_client,
            task_queue,
            journal=journal,
            approvals=ApprovalStore(pool),
            tools=sample_tools.TOOLS,
        ):
            saga = f"shadow-saga-{uuid.uuid4().hex[:8]}"
            result = await temporal_client.execute_workflow(
                STEPS_WORKFLOW,
                SagaSpec(steps=[Step(tool="set_flag", args={"name": saga})]),
                id=saga,
                task_queue=task_queue,
                result_type=SagaResult,
            )
        await journal.close()
    finally:
        await pool.close()
    assert result.status is SagaState.COMPLETED
    assert await _count(owner, f"{REAL} WHERE saga_id = '{saga}'") >= 2
    assert await _count(owner, SHADOW) == 0


async def test_tables_migrated_into_another_schema_are_found_there(
    endpoints: Endpoints, settings: Settings
) -> None:
    name = f"sagacity_ledger_{uuid.uuid4().hex[:12]}"
    owner = await ensure_database(endpoints.database_url, name)
    try:
        await _run(owner, "CREATE SCHEMA ledger")
        # the owner's first schema (conninfo, not URL text: the embedded server's URL has a query)
        in_ledger = make_conninfo(owner, options="-csearch_path=ledger")
        await migrate(in_ledger)
        await apply_grants(in_ledger)
        app = with_user(owner, "sagacity_app")  # its path: "$user", public; no ledger
        saga = f"ledger-{uuid.uuid4().hex[:8]}"
        async with await JournalStore.open(app) as journal:
            await journal.append(Draft(saga, "pay", Phase.INTENT, "{}"))
            assert (await journal.verify(saga)).ok
        assert await _count(owner, "ledger.side_effect_journal") == 1
        assert await unapplied(app) == []
        found = await placement(app)
        assert (found.schema, found.creators, found.shadows) == ("ledger", [], [])
        await check_journal_rights(settings, app)
    finally:
        await drop_database(endpoints.database_url, name)


async def test_a_temporary_copy_changes_nothing(db: tuple[str, str], settings: Settings) -> None:
    # seen only by the session that made it, which names the schema like every other
    owner, app = db
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as held:
        await held.execute(
            "CREATE TEMP TABLE side_effect_journal (LIKE public.side_effect_journal INCLUDING ALL)"
        )
        assert (await placement(app)).shadows == []
        await check_journal_rights(settings, app)
        async with await JournalStore.open(app) as journal:
            await journal.append(Draft(f"temp-{uuid.uuid4().hex[:8]}", "pay", Phase.INTENT, "{}"))
        assert await _count(owner, REAL) == 1


async def test_functions_named_like_built_ins_change_nothing(db: tuple[str, str]) -> None:
    owner, app = db
    # exact matches for the arguments Sagacity's statements pass, first on the app's path
    await _run(
        app,
        *(
            f"CREATE FUNCTION hashtextextended(text, {t}) RETURNS bigint"
            " LANGUAGE sql AS 'SELECT 42::bigint'"
            for t in ("smallint", "integer")
        ),
        "CREATE FUNCTION array_position(name[], name) RETURNS integer"
        " LANGUAGE sql AS 'SELECT NULL::integer'",
    )
    # one compensation lock per (saga, seq): two different calls never share one
    async with (
        await JournalStore.open(app) as journal,
        journal.exclusive("a", 1) as first,
        journal.exclusive("b", 2) as second,
    ):
        assert first and second
    await _run(owner, *SHADOWS_BY_OWNER)  # ahead of the journal on the app's search path
    assert [s.name for s in (await placement(app)).shadows] == [SHADOW]
