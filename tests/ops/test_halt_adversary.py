"""Adversarial tests of the kill switch (issue 15), on real Postgres and Temporal.

Each test states a property the halt must keep; a failing one is a finding (see the report on
branch ``adversary``). The database-level ones write INTENTs as the worker's login does
(``JournalStore.append_at(..., task_queue=...)``) and halts as the tables' owner does
(``HaltStore``), with no mock in between.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import timedelta
from typing import Any, Literal

import psycopg
import pytest
from temporalio.client import Client
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity import compensable
from sagacity.approvals.halts import HaltService, halt_problems
from sagacity.errors import Halted, InvalidInput, NoEffect, SeqConflict, SeqTaken, StoreUnavailable
from sagacity.evidence.decisions import Signer
from sagacity.evidence.redaction import Redactor
from sagacity.journal import Draft, Entry, Phase
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore, Pool, open_pool
from sagacity.store.halts import _FOLD, GATE_LOCK, HaltScope, HaltStore
from sagacity.store.placement import qualify
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.waits import HALT_RECHECK_MAX as _HALT_RECHECK_MAX
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.ops.conftest import Cli
from tests.temporal.conftest import wait_for

TQ = "adv-tq"


@pytest.fixture
async def owner_pool(owner_database_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(owner_database_url, max_size=4)
    try:
        yield pool
    finally:
        # a halt a failed test leaves in force would hold every later test's INTENTs
        async with pool.connection() as conn:
            await conn.execute(
                "INSERT INTO sagacity_halt_gate (id, halts) VALUES (1, '[]') "
                "ON CONFLICT (id) DO NOTHING"
            )
            await conn.execute(
                "UPDATE sagacity_halt SET lifted_at = now(), lifted_by = 'adversary', "
                "lift_reason = 'test ended' WHERE lifted_at IS NULL"
            )
            await conn.execute(qualify(_FOLD, "public"))
        await pool.close()


@pytest.fixture
async def app_journal(database_url: str) -> AsyncIterator[JournalStore]:
    """The journal over the worker's login (sagacity_app), as a worker writes it."""
    store = await JournalStore.open(database_url, max_size=8)
    try:
        yield store
    finally:
        await store.close()


async def intent(journal: JournalStore, saga_id: str, tool: str = "t", seq: int = 1) -> None:
    """Write a call's INTENT at ``seq`` (chained to the saga's row seq-1) as a worker does."""
    await journal.append_at(
        Draft(saga_id, tool, Phase.INTENT, "{}"),
        seq=seq,
        prev_hash=None,
        exclusive=True,
        task_queue=TQ,
    )


async def refused(journal: JournalStore, saga_id: str, tool: str = "t") -> bool:
    try:
        await intent(journal, saga_id, tool)
    except Halted:
        return True
    except (SeqConflict, SeqTaken):
        return False  # past the gate: only the seq was taken (saga "x" of an earlier case)
    return False


async def raw_halt(pool: Pool, scope: Any, policy: str = "keep") -> int:
    """A halt row as the owner can write it with plain SQL, folded into the gate."""
    async with pool.connection() as conn, conn.transaction():
        cur = await conn.execute(
            "INSERT INTO sagacity_halt (kind, scope, policy, reason, operator, halted_at) "
            "VALUES ('halt', %s, %s, 'adversary', 'mallory', now()) RETURNING id",
            (json.dumps(scope), policy),
        )
        row = await cur.fetchone()
        await conn.execute(qualify(_FOLD, "public"))
    assert row is not None
    return int(row[0])


@contextlib.asynccontextmanager
async def adv_worker(
    client: Client, task_queue: str, database_url: str, redactor: Redactor, tools: list[Any]
) -> AsyncIterator[None]:
    """A saga worker with ``tools`` on the worker's login, for the test's task queue."""
    pool = await open_pool(database_url, max_size=4)
    plugin = SagacityPlugin(
        journal=JournalStore(pool), approvals=ApprovalStore(pool), tools=tools, redactor=redactor
    )
    try:
        async with Worker(
            client,
            task_queue=task_queue,
            plugins=[plugin],
            graceful_shutdown_timeout=timedelta(seconds=1),
        ):
            yield
    finally:
        await pool.close()


def saga() -> str:
    return f"adv-{uuid.uuid4().hex[:12]}"


# ------------------------------------------------------------------------------------------------
# The gate under concurrency


async def test_no_intent_commits_after_the_halt_with_40_writers_in_flight(
    owner_pool: Pool, database_url: str
) -> None:
    """40 connections write INTENTs as fast as they can; a halt commits in the middle. Every
    INTENT visible after the halt has returned must already be visible right after it returned
    (nothing commits later), and every writer is refused from then on."""
    journal = await JournalStore.open(database_url, max_size=40)
    tool = f"race-{uuid.uuid4().hex[:6]}"
    stop = asyncio.Event()
    halted_seen = [0]

    async def writer() -> None:
        while not stop.is_set():
            try:
                await intent(journal, saga(), tool)
            except Halted:
                halted_seen[0] += 1
                await asyncio.sleep(0.01)

    async def count() -> int:
        async with owner_pool.connection() as conn:
            cur = await conn.execute(
                "SELECT count(*) FROM side_effect_journal WHERE tool_name = %s", (tool,)
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row[0])

    tasks = [asyncio.create_task(writer()) for _ in range(40)]
    try:
        await asyncio.sleep(1.5)
        await HaltStore(owner_pool).halt(
            kind="halt",
            scope=HaltScope(tool=tool),
            policy="keep",
            reason="race",
            operator="adversary",
            signature=None,
        )
        at_halt = await count()
        await asyncio.sleep(1.5)
        stop.set()
        await asyncio.gather(*tasks)
        assert at_halt > 0
        assert await count() == at_halt
        assert halted_seen[0] > 0
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await journal.close()


async def test_intents_queued_behind_a_slow_halt_see_it_when_it_commits(
    owner_pool: Pool, database_url: str
) -> None:
    """The halt's transaction (HaltStore.halt's statements) held open for 1.5 s, so that 30
    INTENTs queue on the gate's lock with snapshots older than the halt: the gate must be read
    afresh once they get it, and refuse every one of them."""
    journal = await JournalStore.open(database_url, max_size=30)
    tool = f"queued-{uuid.uuid4().hex[:6]}"
    outcomes: list[str] = []
    try:
        async with owner_pool.connection() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(%s, %s)", GATE_LOCK)
            await conn.execute(
                "INSERT INTO sagacity_halt (kind, scope, policy, reason, operator, halted_at) "
                "VALUES ('halt', %s, 'keep', 'slow', 'adversary', now())",
                (json.dumps({"tool": tool}),),
            )
            await conn.execute(qualify(_FOLD, "public"))

            async def one() -> None:
                try:
                    await intent(journal, saga(), tool)
                    outcomes.append("written")
                except Halted:
                    outcomes.append("refused")

            writers = [asyncio.create_task(one()) for _ in range(30)]
            await asyncio.sleep(1.5)
            assert not outcomes, "INTENTs did not wait for the gate row"
        await asyncio.wait_for(asyncio.gather(*writers), timeout=30)
        assert outcomes == ["refused"] * 30, outcomes
    finally:
        await journal.close()


async def test_a_worker_login_cannot_hold_the_kill_switch_off(
    owner_pool: Pool, database_url: str
) -> None:
    """Any login may take the gate's advisory lock (each INTENT takes it shared); a session
    of the worker's that keeps it (a stuck transaction, a compromised worker) must not make
    ``halt`` hang: it must go through, or fail saying who blocks it, in bounded time."""
    blocker = await psycopg.AsyncConnection.connect(database_url)
    try:
        await blocker.execute("BEGIN")
        await blocker.execute("SELECT pg_advisory_xact_lock_shared(%s, %s)", GATE_LOCK)
        halt = HaltStore(owner_pool).halt(
            kind="halt",
            scope=HaltScope(tool="never-called"),
            policy="keep",
            reason="blocked?",
            operator="adversary",
            signature=None,
        )
        try:
            await asyncio.wait_for(halt, timeout=10)
        except TimeoutError:
            pytest.fail("`halt` hung for 10 s behind a worker session's lock on the gate")
        except StoreUnavailable as exc:  # a clear refusal naming the blocker
            assert f"pid {blocker.info.backend_pid} (sagacity_app" in str(exc)
    finally:
        await blocker.close()


async def test_the_halt_is_not_starved_by_a_stream_of_intents(
    owner_pool: Pool, database_url: str
) -> None:
    """FOR SHARE lockers do not queue behind a waiting FOR UPDATE: with enough INTENTs
    overlapping, the halt's exclusive lock may never be granted. 30 writers on 30
    connections; the halt must commit within 5 s."""
    journal = await JournalStore.open(database_url, max_size=30)
    stop = asyncio.Event()

    async def writer() -> None:
        while not stop.is_set():
            with contextlib.suppress(Halted):
                await intent(journal, saga(), "busy")

    tasks = [asyncio.create_task(writer()) for _ in range(30)]
    try:
        await asyncio.sleep(1.0)
        loop = asyncio.get_running_loop()
        start = loop.time()
        await asyncio.wait_for(
            HaltStore(owner_pool).halt(
                kind="halt",
                scope=HaltScope(tool="not-busy"),
                policy="keep",
                reason="starve?",
                operator="adversary",
                signature=None,
            ),
            timeout=30,
        )
        took = loop.time() - start
        assert took < 5, f"the halt took {took:.1f}s to get the gate"
    finally:
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        await journal.close()


# ------------------------------------------------------------------------------------------------
# The gate row and what the owner can write


async def test_a_halt_with_the_gate_row_gone_still_halts(
    owner_pool: Pool, app_journal: JournalStore
) -> None:
    """With the gate row deleted (a restore, a TRUNCATE, a hand edit), ``halt`` returns as if
    it were in force: it must then refuse the INTENTs it covers, or refuse to be written."""
    async with owner_pool.connection() as conn:
        await conn.execute("DELETE FROM sagacity_halt_gate")
    try:
        await HaltStore(owner_pool).halt(
            kind="halt",
            scope=HaltScope(),
            policy="keep",
            reason="gate gone",
            operator="adversary",
            signature=None,
        )
    except Exception:  # refusing to write the halt is fine
        return
    assert await refused(app_journal, saga()), "halt in force, yet an INTENT was written"


@pytest.mark.parametrize(
    "scope",
    [
        {"tool": None},
        {"task_queue": None},
        {"sagas": None},
        {"Tool": "t"},
        {"sagas": "xy"},
    ],
    ids=["tool-null", "task_queue-null", "sagas-null", "unknown-key", "sagas-string"],
)
async def test_what_a_halt_row_says_it_covers_is_what_the_gate_refuses(
    owner_pool: Pool, app_journal: JournalStore, scope: dict[str, Any]
) -> None:
    """A halt written with plain SQL (the owner may): the scope ``sagacity halts`` shows
    (``HaltScope.from_json``, ``covers``) and the scope the gate enforces must agree, or the
    row must be refused."""
    try:
        halt_id = await raw_halt(owner_pool, scope)
    except psycopg.Error:
        return  # refused by the schema: fine
    try:
        shown = await HaltStore(owner_pool).get(halt_id)
    except InvalidInput:
        return  # unreadable: the next test covers what that breaks
    assert shown is not None
    sid = "xy"
    says = shown.scope.covers(sid, "t", TQ)
    does = await refused(app_journal, sid, "t")
    assert says == does, (
        f"halt {halt_id} scope {scope}: `sagacity halts` shows {shown.scope.describe()!r} "
        f"(covers: {says}), the gate {'refuses' if does else 'lets through'} the INTENT"
    )


@pytest.mark.parametrize(
    "scope",
    [{"sagas": []}, {"sagas": "xy"}, {"tool": None}, {"Tool": "t"}, {"tool": 3}, []],
    ids=["no-sagas", "sagas-string", "tool-null", "unknown-key", "tool-number", "not-an-object"],
)
async def test_the_table_refuses_a_halt_row_no_reader_could_take(
    owner_pool: Pool, scope: Any
) -> None:
    """One bad row read through HaltScope would break ``sagacity halts``, ``resume`` and every
    compensation's hold check; the schema refuses it, even from the owner's plain SQL."""
    before = await HaltStore(owner_pool).list()
    with pytest.raises(psycopg.errors.CheckViolation):
        await raw_halt(owner_pool, scope)
    assert await HaltStore(owner_pool).list() == before


async def test_no_intent_follows_a_halt_whatever_path_writes_it(
    owner_pool: Pool, app_journal: JournalStore
) -> None:
    """The README: "a worker that never heard of the halt still obeys, and no INTENT follows
    the halt in any journal". The public ``JournalStore.append`` and ``append_at`` without a
    task queue (the ``append`` activity's path) are refused under a halt of everything, as
    ``append_at(task_queue=…)`` is: the journal's trigger refuses the row (schema 0009)."""
    await HaltStore(owner_pool).halt(
        kind="halt",
        scope=HaltScope(),
        policy="keep",
        reason="everything",
        operator="adversary",
        signature=None,
    )
    written = []
    sid = saga()
    writes: list[tuple[str, Callable[[], Awaitable[Entry]]]] = [
        ("JournalStore.append", lambda: app_journal.append(Draft(sid, "t", Phase.INTENT, "{}"))),
        (
            "append_at without task_queue",
            lambda: app_journal.append_at(Draft(sid, "t", Phase.INTENT, "{}"), seq=1),
        ),
    ]
    for how, write in writes:
        try:
            await write()
            written.append(how)
        except Halted:
            pass
    assert not written, f"INTENTs written under a halt of everything by: {written}"


# ------------------------------------------------------------------------------------------------
# Tamper evidence


@pytest.fixture
def halt_service(temporal_client: Client, settings: Settings, owner_pool: Pool) -> HaltService:
    assert settings.approver_key is not None
    return HaltService(
        temporal_client,
        HaltStore(owner_pool),
        JournalStore(owner_pool),
        signer=Signer.open(settings.approver_key),
        keyring=settings.load_keyring(),
    )


async def test_halts_shows_a_halt_in_force_only_if_the_gate_enforces_it(
    halt_service: HaltService, owner_pool: Pool, app_journal: JournalStore, settings: Settings
) -> None:
    """The owner empties the gate: the halt still lists as active with good signatures
    (``halt_problems`` finds nothing) while every INTENT goes through. What ``sagacity halts``
    says is in force must be what the gate enforces, or it must say they differ."""
    result = await halt_service.halt(
        scope=HaltScope(tool="gate-tamper"),
        policy="keep",
        reason="tamper test",
        operator="alice",
        settle=timedelta(0),
    )
    async with owner_pool.connection() as conn:
        await conn.execute("UPDATE sagacity_halt_gate SET halts = '[]'")
    enforced = await refused(app_journal, saga(), "gate-tamper")
    halt = await HaltStore(owner_pool).get(result.halt_id)
    assert halt is not None and halt.active
    problems = halt_problems(
        halt, settings.load_keyring(), enforced=await HaltStore(owner_pool).enforced()
    )
    assert enforced or problems, "listed in force, signatures ok, yet not enforced"
    assert any("not in the gate" in p for p in problems)


async def test_editing_a_signed_halts_time_is_detected(
    halt_service: HaltService, owner_pool: Pool, settings: Settings
) -> None:
    """``halted_at`` (and ``lifted_at``) are what an auditor compares journals with; the
    signature covers kind, scope, policy, operator and reason but neither time."""
    result = await halt_service.halt(
        scope=HaltScope(tool="time-tamper"),
        policy="keep",
        reason="time test",
        operator="alice",
        settle=timedelta(0),
    )
    await halt_service.resume(result.halt_id, by="alice", reason="done")
    async with owner_pool.connection() as conn:
        await conn.execute(
            "UPDATE sagacity_halt SET halted_at = halted_at + interval '1 hour', "
            "lifted_at = lifted_at + interval '2 hours' WHERE id = %s",
            (result.halt_id,),
        )
    halt = await HaltStore(owner_pool).get(result.halt_id)
    assert halt is not None
    assert halt_problems(halt, settings.load_keyring()), "moved halt times went unnoticed"


async def test_a_signed_halt_copied_to_a_new_row_is_detected(
    halt_service: HaltService, owner_pool: Pool, settings: Settings
) -> None:
    """A halt's statement is signed with seq 0, so its signature fits any row with the same
    kind, scope, policy, operator and reason: the owner can mint a 'signed by alice' halt."""
    result = await halt_service.halt(
        scope=HaltScope(tool="replay"),
        policy="keep",
        reason="replay test",
        operator="alice",
        settle=timedelta(0),
    )
    async with owner_pool.connection() as conn:
        cur = await conn.execute(
            "INSERT INTO sagacity_halt (kind, scope, policy, reason, operator, halted_at, "
            "signature) SELECT kind, scope, policy, reason, operator, now() + interval '1 day', "
            "signature FROM sagacity_halt WHERE id = %s RETURNING id",
            (result.halt_id,),
        )
        row = await cur.fetchone()
    assert row is not None
    copy = await HaltStore(owner_pool).get(int(row[0]))
    assert copy is not None
    assert halt_problems(copy, settings.load_keyring()), "a copied signature verifies"


# ------------------------------------------------------------------------------------------------
# A call that does start after the halt


CALLS: list[str] = []


@compensable(by="adv_unfetch", idempotent=True)
async def adv_fetch(key: str, owner_url: str) -> str:
    """Idempotent. Its first call halts every call of itself (as an operator would, right
    then), and fails as a flaky network does; Temporal retries it."""
    CALLS.append(key)
    if len(CALLS) == 1:
        pool = await open_pool(owner_url, max_size=1)
        try:
            await HaltStore(pool).halt(
                kind="halt",
                scope=HaltScope(tool="adv_fetch"),
                policy="keep",
                reason="fetch misbehaves",
                operator="adversary",
                signature=None,
            )
        finally:
            await pool.close()
        raise ConnectionError("upstream reset")
    return key


def adv_unfetch(ctx: Any) -> None:
    CALLS.append(f"undo {ctx.input['key']}")


async def test_an_idempotent_tool_is_not_called_again_after_a_halt_covering_it(
    temporal_client: Client,
    task_queue: str,
    app_journal: JournalStore,
    owner_pool: Pool,
    owner_database_url: str,
    redactor: Redactor,
    database_url: str,
) -> None:
    """A halt commits while an idempotent call is between attempts. The retry finds its
    INTENT already written and runs the tool again (``_resume`` → ``_run``): a tool call
    that starts after the halt that covers it, which the README says cannot happen."""
    CALLS.clear()
    sid = saga()
    async with adv_worker(temporal_client, task_queue, database_url, redactor, [adv_fetch]):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[Step(tool="adv_fetch", args={"key": "k", "owner_url": owner_database_url})]
            ),
            id=sid,
            task_queue=task_queue,
            result_type=SagaResult,
        )
        # attempt 1 halts and fails, Temporal retries it unbeknown to the saga: the saga moves
        # on only once attempt 2 has ended, held by the halt (or, calling the tool, completed)
        await wait_for(handle, lambda s: s.state is not SagaState.RUNNING)
        calls = list(CALLS)
        with contextlib.suppress(Exception):
            await handle.terminate("test over")
    assert calls == ["k"], f"the tool was called after the halt covering it: {calls}"


__all__ = ["SagaState"]


async def test_halt_search_reaches_a_running_saga_that_has_not_written_yet(
    halt_service: HaltService, temporal_client: Client, owner_pool: Pool
) -> None:
    """``sagacity halt --search Q`` halts the sagas Q finds *now*, mapped through the journal's
    owner table: a running saga whose workflow has not claimed its journal yet (its first
    task still queued, as under the load an operator halts for) is dropped from the scope, and
    its calls then run after the halt."""
    sid = saga()
    idle_queue = f"adv-no-worker-{uuid.uuid4().hex[:8]}"  # no worker: it stays unclaimed
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="anything", args={})]),
        id=sid,
        task_queue=idle_queue,
        result_type=SagaResult,
    )
    try:
        query = f'WorkflowId="{sid}" AND ExecutionStatus="Running"'
        for _ in range(50):  # visibility is eventually consistent
            if [w async for w in temporal_client.list_workflows(query)]:
                break
            await asyncio.sleep(0.1)
        else:
            pytest.skip("visibility never listed the workflow")
        found = await halt_service.reached_by_query(query)
        assert [s for s, _ in found] == [sid], f"the search found {sid} running, halts {found}"
    finally:
        await handle.terminate("test over")


FORGED: list[str] = []


@compensable(by="adv_unforge", idempotent=True)
async def adv_forge(key: str) -> str:
    """Idempotent, and fails (the first time) with an error of Temporal type ``Halted`` whose
    details are a halt notice: signed by no one, in force nowhere."""
    FORGED.append(key)
    if len(FORGED) == 1:
        raise ApplicationError(
            "upstream says stop",
            {
                "halt_id": 7,
                "kind": "halt",
                "policy": "compensate",
                "reason": "forged",
                "operator": "alice",
            },
            type="Halted",
            non_retryable=True,
        )
    return key


def adv_unforge(ctx: Any) -> None:
    FORGED.append(f"undo {ctx.input['key']}")


async def test_a_tool_cannot_forge_an_operators_halt(
    temporal_client: Client, task_queue: str, redactor: Redactor, database_url: str
) -> None:
    """The saga takes any activity failure of type ``Halted`` for the gate's refusal, and an
    idempotent tool's ApplicationError keeps its type on the way out (``_scrubbed``). So a tool
    can hold its saga as 'halted' or, with policy compensate, abort it in the name of an
    operator ('by alice') while no halt exists; and the INTENT it says was refused is in the
    journal."""
    FORGED.clear()
    async with adv_worker(temporal_client, task_queue, database_url, redactor, [adv_forge]):
        result = await asyncio.wait_for(
            temporal_client.execute_workflow(
                STEPS_WORKFLOW,
                SagaSpec(steps=[Step(tool="adv_forge", args={"key": "k"})]),
                id=saga(),
                task_queue=task_queue,
                result_type=SagaResult,
            ),
            timeout=30,
        )
    said = result.error.message if result.error else ""
    assert "alice" not in said and "halted" not in said, (
        f"no halt exists, yet the saga ended {result.status.value}: {said!r}; tool calls {FORGED}"
    )


async def halts_listed(sagacity: Cli, settings: Settings, owner_url: str) -> dict[int, Any]:
    """``sagacity halts --all --json`` as an operator runs it, by halt id."""
    assert settings.approver_key is not None and settings.keyring is not None
    out = await sagacity(
        "halts",
        "--all",
        "--json",
        extra_env={
            "SAGACITY_OWNER_DATABASE_URL": owner_url,
            "SAGACITY_APPROVER_KEY": str(settings.approver_key),
            "SAGACITY_KEYRING": str(settings.keyring),
        },
    )
    assert out.code == 0 and "Traceback" not in out.stderr, out.stderr[-3000:]
    return {int(row["id"]): row for row in json.loads(out.stdout)}


@pytest.mark.parametrize(
    ("column", "value"),
    [("report", {"live": []}), ("signature", {"key": "x"}), ("report", None)],
    ids=["report-garbled", "signature-garbled", "report-removed"],
)
async def test_halts_survives_and_flags_an_edited_or_removed_report(
    halt_service: HaltService,
    owner_pool: Pool,
    sagacity: Cli,
    settings: Settings,
    owner_database_url: str,
    column: str,
    value: Any,
) -> None:
    """The owner edits a signed halt's report or signature into JSON that is none, or removes
    the report. ``sagacity halts`` must still list it (no traceback) and flag it: a signed
    halt's report was taken and signed, so a missing one is a change too."""
    result = await halt_service.halt(
        scope=HaltScope(tool=f"tamper-{column}"),
        policy="keep",
        reason="report test",
        operator="alice",
        settle=timedelta(0),
    )
    async with owner_pool.connection() as conn:
        await conn.execute(
            f"UPDATE sagacity_halt SET {column} = %s WHERE id = %s",
            (None if value is None else json.dumps(value), result.halt_id),
        )
    listed = await halts_listed(sagacity, settings, owner_database_url)
    assert listed[result.halt_id]["problems"], f"{column} edited, not flagged"


UNDOING: list[str] = []


@compensable(by="adv_slow_undo")
def adv_put(key: str) -> str:
    return key


async def adv_slow_undo(ctx: Any) -> None:
    UNDOING.append(f"start {ctx.input['key']}")
    await asyncio.sleep(4)
    UNDOING.append(f"done {ctx.input['key']}")


@compensable(by="adv_slow_undo")
def adv_refuse(key: str) -> None:
    raise NoEffect("refused upstream")


async def test_a_keep_halt_report_counts_compensations_already_running(
    temporal_client: Client,
    task_queue: str,
    halt_service: HaltService,
    owner_pool: Pool,
    redactor: Redactor,
    database_url: str,
) -> None:
    """``--policy keep`` "freezes everything, compensations included", and the signed report
    is taken "once the calls already running have finished". A compensation already running
    when the halt commits cannot be stopped part-way: it finishes after the halt, so the report
    must not call live and untouched an effect that is being undone (and then is gone)."""
    UNDOING.clear()
    sid = saga()
    async with adv_worker(
        temporal_client, task_queue, database_url, redactor, [adv_put, adv_refuse]
    ):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[
                    Step(tool="adv_put", args={"key": "a"}),
                    Step(tool="adv_refuse", args={"key": "b"}),
                ]
            ),
            id=sid,
            task_queue=task_queue,
            result_type=SagaResult,
        )
        for _ in range(100):
            if UNDOING:
                break
            await asyncio.sleep(0.1)
        assert UNDOING == ["start a"]
        result = await halt_service.halt(
            scope=HaltScope(sagas=(sid,)),
            policy="keep",
            reason="freeze it",
            operator="alice",
            settle=timedelta(seconds=1),
        )
        reported = [(e.tool, e.state) for e in result.report.live]
        ended = await asyncio.wait_for(handle.result(), timeout=30)
    rows = [(r.tool_name, r.phase.value) for r in await JournalStore(owner_pool).read(sid)]
    compensated_after_halt = ("adv_put", "COMPENSATED") in rows
    assert not (compensated_after_halt and reported == [("adv_put", "executed")]), (
        f"keep halt reported {reported} live, then the compensation finished: {UNDOING}, "
        f"saga {ended.status.value}, journal {rows}"
    )


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE sagacity_halt_gate SET halts = '[]'",
        "DELETE FROM sagacity_halt_gate",
        "TRUNCATE sagacity_halt_gate",
        "INSERT INTO sagacity_halt_gate (id, halts) VALUES (1, '[]') ON CONFLICT (id) "
        "DO UPDATE SET halts = '[]'",
        "UPDATE sagacity_halt SET lifted_at = now()",
        "INSERT INTO sagacity_halt (kind, scope, policy, reason, operator, halted_at) "
        "VALUES ('halt', '{}', 'keep', 'r', 'o', now())",
        "DELETE FROM sagacity_halt",
        "ALTER TABLE sagacity_halt_gate DISABLE ROW LEVEL SECURITY",
        "CREATE TRIGGER t BEFORE INSERT ON side_effect_journal FOR EACH ROW "
        "EXECUTE FUNCTION suppress_redundant_updates_trigger()",
    ],
)
async def test_the_worker_login_cannot_open_the_gate(database_url: str, statement: str) -> None:
    """What sagacity_app may do to halts: read them, lock the gate row. Nothing that lifts a
    halt or empties the gate."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(statement)


@pytest.mark.parametrize(
    "args",
    [
        ["--tool", "a\x00b"],
        ["--tool", "x" * 100_000],
        ["--saga", ""],
        ["--saga", "\udcff"],
        ["--task-queue", 'a"b'],
        ["--search", "WorkflowId = (((("],
        ["--policy", "KEEP"],
        ["--settle", "nan"],
        ["--settle", "inf"],
        ["--settle", "1e300"],
        ["--as", "\u202e"],
    ],
    ids=lambda a: f"{a[0]}={a[1][:12]!r}",
)
async def test_bad_halt_flags_write_nothing_and_exit_2(
    sagacity: Cli,
    settings: Settings,
    owner_database_url: str,
    owner_pool: Pool,
    args: list[str],
) -> None:
    assert settings.approver_key is not None and settings.keyring is not None
    before = len(await HaltStore(owner_pool).list(limit=10_000))
    out = await sagacity(
        "halt",
        "--reason",
        "bad input",
        *args,
        extra_env={
            "SAGACITY_OWNER_DATABASE_URL": owner_database_url,
            "SAGACITY_APPROVER_KEY": str(settings.approver_key),
            "SAGACITY_KEYRING": str(settings.keyring),
        },
    )
    after = len(await HaltStore(owner_pool).list(limit=10_000))
    assert (out.code, "Traceback" in out.stderr, after - before) == (2, False, 0), (
        out.code,
        out.stdout[-500:],
        out.stderr[-1500:],
    )


@pytest.mark.parametrize(
    "args",
    [["--tool", "Create_Order"], ["--tool", "create_order "], ["--task-queue", "orderz"]],
    ids=["tool-case", "tool-trailing-space", "task-queue-typo"],
)
async def test_a_halt_that_can_match_nothing_says_so(
    sagacity: Cli, settings: Settings, owner_database_url: str, owner_pool: Pool, args: list[str]
) -> None:
    """The gate matches names byte for byte. An operator who types the tool or task queue
    slightly wrong in an emergency gets "halt N in force" and a clean report, while every
    call goes on. A name no journal and no worker has ever used deserves a warning (or a
    refusal), not silence."""
    assert settings.approver_key is not None and settings.keyring is not None
    out = await sagacity(
        "halt",
        "--reason",
        "typo",
        "--settle",
        "0",
        *args,
        extra_env={
            "SAGACITY_OWNER_DATABASE_URL": owner_database_url,
            "SAGACITY_APPROVER_KEY": str(settings.approver_key),
            "SAGACITY_KEYRING": str(settings.keyring),
        },
    )
    said = (out.stdout + out.stderr).lower()
    assert out.code != 0 or any(w in said for w in ("unknown", "no such", "never", "warning")), (
        f"exit {out.code}, silent about {args}: {out.stdout}"
    )


async def test_a_long_quarantine_fits_in_one_workflow_history(
    temporal_client: Client,
    task_queue: str,
    owner_pool: Pool,
    redactor: Redactor,
    database_url: str,
) -> None:
    """A held saga looks again every 30 s, doubling to every hour, and never continues as
    new while held (only between calls). Each look is an activity attempt and a timer in
    history. Measured here with resume signals (each one a look; its signal event is not
    counted), extrapolated to a 60-day quarantine "for investigation": it must stay under
    Temporal's 51,200-event limit, past which the server terminates the saga with its effects
    live (or the held loop must continue as new, as the saga does between calls)."""
    sid = saga()
    await HaltStore(owner_pool).halt(
        kind="quarantine",
        scope=HaltScope(sagas=(sid,)),
        policy="keep",
        reason="investigating",
        operator="adversary",
        signature=None,
    )
    async with adv_worker(temporal_client, task_queue, database_url, redactor, [adv_put]):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(steps=[Step(tool="adv_put", args={"key": "q"})]),
            id=sid,
            task_queue=task_queue,
            result_type=SagaResult,
        )

        async def length() -> int:
            return len((await handle.fetch_history()).events)

        await wait_for(handle, lambda s: s.state is SagaState.HALTED)  # its first look is done
        before = await length()
        looks = 5  # each look is the same few events: five give the average ten did
        for _ in range(looks):
            await handle.signal("resume", {"halt_id": 1, "operator": "bob"})
            await asyncio.sleep(0.7)
        per_look = (await length() - before) / looks - 1  # the signal's own event
        await handle.terminate("test over")
    days = 51_200 / (per_look * 24 * 3600 / _HALT_RECHECK_MAX.total_seconds())  # at the cap
    assert days > 60, f"{per_look:.1f} events per look: the history limit after {days:.0f} days"


async def test_overlapping_halts_lift_one_at_a_time(
    owner_pool: Pool, app_journal: JournalStore
) -> None:
    """A halt of everything, a halt of tool t and two quarantines of saga s: lifting them one
    by one opens exactly what the remaining ones no longer cover."""
    store = HaltStore(owner_pool)
    s = saga()

    async def put(kind: Literal["halt", "quarantine"], scope: HaltScope) -> int:
        halt = await store.halt(
            kind=kind, scope=scope, policy="keep", reason="r", operator="o", signature=None
        )
        return halt.id

    everything = await put("halt", HaltScope())
    tool_t = await put("halt", HaltScope(tool="t"))
    q1 = await put("quarantine", HaltScope(sagas=(s,)))
    q2 = await put("quarantine", HaltScope(sagas=(s,)))

    async def state() -> tuple[bool, bool, bool]:
        return (
            await refused(app_journal, saga(), "u"),
            await refused(app_journal, saga(), "t"),
            await refused(app_journal, s, "u"),
        )

    assert await state() == (True, True, True)
    await store.lift(everything, by="o", reason="r", signature=None)
    assert await state() == (False, True, True)
    await store.lift(q1, by="o", reason="r", signature=None)
    assert await state() == (False, True, True)
    await store.lift(tool_t, by="o", reason="r", signature=None)
    assert await state() == (False, False, True)
    await store.lift(q2, by="o", reason="r", signature=None)
    assert await state() == (False, False, False)
