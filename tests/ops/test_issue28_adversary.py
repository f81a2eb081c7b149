"""Adversary tests for issue 28: rollback of ended sagas, certify reading runs, permanent
compensation errors, the halt trigger, and the journaled-results reader.

Each test states what it tries to break. Those marked xfail(strict) are breaks found and not
fixed here; the rest pin a guarantee that held. Real Temporal, real Postgres."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
import pytest
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowHandle
from temporalio.worker import Worker

from sagacity.journal import ROLLBACK, Entry, Phase
from sagacity.store import JournalStore
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.store.journal import HALTED_SQLSTATE
from sagacity.temporal.models import (
    Approve,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.rollback import RollbackResult, rollback_id
from tests.approvals.conftest import (
    Cli,
    StartOrder,
    approvals,
    cli,
    journal,
    pool,
    shop,
    shop_session,
    start_order,
    worker,
)
from tests.store.test_halt_trigger import count, db, first_row, halt, halts, insert
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_operations import new_id, reset_after_first_call, start_steps
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

__all__ = [
    "approvals",
    "cli",
    "db",
    "halts",
    "journal",
    "pool",
    "shop",
    "shop_session",
    "start_order",
    "worker",
]


async def _settle(handle: WorkflowHandle[Any, SagaResult], seconds: float = 20) -> None:
    """Wait until the run is closed or waits for a human, whichever comes first."""
    loop = asyncio.get_running_loop()
    end = loop.time() + seconds
    while loop.time() < end:
        described = await handle.describe()
        if described.status is not WorkflowExecutionStatus.RUNNING:
            return
        try:
            status = await handle.query("status", result_type=SagaStatus)
        except Exception:
            status = None
        if status is not None and awaiting_approval(status):
            return
        await asyncio.sleep(0.3)


async def test_a_rolled_back_saga_reset_afterwards_makes_no_effect_nobody_undoes(
    start_order: StartOrder,
    cli: Cli,
    journal: JournalStore,
    shop: Shop,
    temporal_client: Client,
) -> None:
    """Terminate, roll back, then `temporal workflow reset` the terminated run: the chain runs
    again over a journal that says it was rolled back. Whatever it does, the world must not end
    with an effect live that certify passes."""
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    done = await cli("saga", "rollback", waiting.saga_id, "--wait", "--reason", "r", "--by", "o")
    assert done.code == 0, done.stderr
    assert (await shop.snapshot()).placed_orders == 0

    run_id = await reset_after_first_call(temporal_client, waiting.handle)
    again = temporal_client.get_workflow_handle(
        waiting.saga_id, run_id=run_id, result_type=SagaResult
    )
    await _settle(again)
    status = await again.query("status", result_type=SagaStatus)
    if awaiting_approval(status):
        assert status.pending_approval is not None
        await again.signal(
            "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="alice")
        )
    with contextlib.suppress(Exception):
        await asyncio.wait_for(again.result(), 30)
    rows = await journal.read(waiting.saga_id)
    said = next(x.seq for x in rows if x.tool_name == ROLLBACK)
    after = [r for r in rows if r.seq > said]
    # no call after the rollback: the run over a rolled-back journal must not go on
    assert [r.tool_name for r in after if r.phase is Phase.INTENT] == []
    snap = await shop.snapshot()
    certified = await cli("certify", "--saga", waiting.saga_id)
    live = (snap.held_reservations, snap.placed_orders)
    assert certified.code == 1 or live == (0, 0), (live, certified.stdout)


async def test_a_reset_while_the_rollback_runs_ends_rolled_back_and_leaves_the_undo_to_it(
    start_order: StartOrder,
    cli: Cli,
    journal: JournalStore,
    shop: Shop,
    temporal_client: Client,
) -> None:
    """Start a rollback whose first undo keeps failing for a few seconds, and reset the
    terminated run meanwhile: the chain runs again over a journal that says it is rolled back.
    The reset run makes no call and does not undo anything itself (two undos of one effect
    could both run): it ends aborted, naming the rollback, which undoes each effect once.
    Before the fix the reset run made its calls again and completed, and the rollback failed."""
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    await shop.arm_fault("cancel_order", "the order service is slow", times=3)
    started = await cli("saga", "rollback", waiting.saga_id, "--attempts", "10")
    assert started.code == 0, started.stderr

    run_id = await reset_after_first_call(temporal_client, waiting.handle)
    again = temporal_client.get_workflow_handle(
        waiting.saga_id, run_id=run_id, result_type=SagaResult
    )
    ended = await asyncio.wait_for(again.result(), 30)
    assert ended.status is SagaState.ABORTED, ended
    assert ended.error is not None and "rolled back by" in ended.error.message, ended.error
    rollback = temporal_client.get_workflow_handle(
        rollback_id(waiting.saga_id), result_type=RollbackResult
    )
    result = await asyncio.wait_for(rollback.result(), 60)
    assert [u.tool_name for u in result.compensated] == ["create_order", "reserve_inventory"]
    snap = await shop.snapshot()
    assert (snap.held_reservations, snap.placed_orders) == (0, 0)
    rows = await journal.read(waiting.saga_id)
    said = next(r.seq for r in rows if r.tool_name == ROLLBACK)
    assert [r.tool_name for r in rows if r.seq > said and r.phase is Phase.INTENT] == []
    undone = [r.tool_name for r in rows if r.phase is Phase.COMPENSATED]
    assert sorted(undone) == ["create_order", "reserve_inventory"]
    assert (await cli("certify", "--saga", waiting.saga_id)).code == 0


# -- permanent compensation errors ------------------------------------------------------------


async def test_a_keyerror_of_the_undos_own_code_is_retried_not_made_permanent(
    temporal_client: Client, worker: Worker, journal: JournalStore
) -> None:
    """Only a key missing from the context is permanent: a KeyError of the undo's own lookup
    (a registry a later attempt finds filled) is retried, and the undo succeeds."""
    key = new_id("late")
    handle = await start_steps(
        temporal_client,
        worker,
        [Step(tool="lookup_late", args={"key": key}), Step(tool="decline", args={"reason": "r"})],
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED, result
    assert sample_tools.UNDO_TRIES[key] == 3
    phases = [(r.tool_name, r.phase) for r in await journal.read(handle.id)]
    assert ("lookup_late", Phase.COMPENSATED) in phases
    assert ("lookup_late", Phase.COMPENSATION_FAILED) not in phases


async def test_a_permanent_failure_among_several_effects_the_rest_still_undone_in_reverse(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """An undo that catches the context's KeyError and raises it again fails at once (one try);
    the effects before and after it are still undone, newest first; the saga is flagged and
    `saga status --wait` reports it ended unfinished (exit 1), not running or failing (4)."""
    a, b, c = (new_id(x) for x in "abc")
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": a}),
            Step(tool="breakable", args={"key": b}),
            Step(tool="set_flag", args={"name": c}),
            Step(tool="decline", args={"reason": "r"}),
        ],
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATION_FAILED, result
    mine = [e for e in sample_tools.EFFECTS if a in e or b in e or c in e]
    assert mine == [
        f"set {a}",
        f"breakable {b}",
        f"set {c}",
        f"unset {c}",
        f"unbreak tried {b}",  # once: no retry of a permanent failure
        f"unset {a}",
    ]
    rows = [(r.tool_name, r.phase) for r in await journal.read(handle.id)]
    assert rows[-3:] == [
        ("set_flag", Phase.COMPENSATED),
        ("breakable", Phase.COMPENSATION_FAILED),
        ("set_flag", Phase.COMPENSATED),
    ]
    status = await cli("saga", "status", handle.id, "--wait")
    assert status.code == 1, (status.stdout, status.stderr)
    assert (await cli("certify", "--saga", handle.id)).code == 1


# -- the journaled-results reader, through a rollback (which reads every result from the journal)


async def _terminated_after_echo(
    temporal_client: Client, worker: Worker, journal: JournalStore, value: Any
) -> str:
    """A Steps saga that echoed ``value``, set a flag and was terminated during its third call
    (slow_note, INTENT journaled, no outcome: SUSPECT); its id."""
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="echo", args={"value": value}),
            Step(tool="set_flag", args={"name": new_id("f")}),
            Step(tool="slow_note", args={"text": "t", "seconds": 30}),
        ],
    )
    loop = asyncio.get_running_loop()
    end = loop.time() + 20
    while not [r for r in await journal.read(handle.id) if r.tool_name == "slow_note"]:
        assert loop.time() < end, "slow_note never started"
        await asyncio.sleep(0.2)
    await handle.terminate(reason="test")
    return handle.id


async def _rolled_back_echo(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli, value: Any
) -> tuple[str, list[Any]]:
    """Roll back a terminated saga that echoed ``value``: its id, and what unecho was given."""
    saga_id = await _terminated_after_echo(temporal_client, worker, journal, value)
    before = len(sample_tools.RECEIVED)
    done = await cli("saga", "rollback", saga_id, "--wait", "--by", "o", "--reason", "r")
    got = [v for name, v in sample_tools.RECEIVED[before:] if name == "unecho"]
    return saga_id, [done.code, got]


async def test_rollback_of_a_saga_with_a_suspect_call_leaves_it_to_a_human(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """A rollback undoes what surely happened and does not pretend about the SUSPECT call (the
    stalled slow_note): certify still names it afterwards, for a human to resolve."""
    saga_id, (code, got) = await _rolled_back_echo(
        temporal_client, worker, journal, cli, {"plain": 1}
    )
    assert code == 0
    assert got == [{"plain": 1}]
    certified = await cli("certify", "--json", "--saga", saga_id)
    assert certified.code == 1, certified.stdout
    assert "slow_note" in certified.stdout


async def test_a_result_shaped_like_a_resolution_reaches_the_undo_as_it_was(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """A tool's own result shaped like an unsigned resolution of a SUSPECT call is its result:
    only a row the resolution wrote (marked ``$resolution``, or signed) is read as one. Before
    the fix the undo was given 1."""
    real = {"resolved_by": "x", "result": 1}
    _, (code, got) = await _rolled_back_echo(temporal_client, worker, journal, cli, real)
    assert code == 0
    assert got == [real]


async def test_a_result_holding_the_marker_as_data_is_flagged_not_rebuilt(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """A tool whose real result holds ``{"$redacted": …}`` as data (nothing was redacted): the
    reader cannot tell it from a redacted result, so the undo does not run and the effect is
    flagged for a human (exit 1) -- never given something that is not the result."""
    real = {"note": {"$redacted": "literally"}}
    saga_id, (code, got) = await _rolled_back_echo(temporal_client, worker, journal, cli, real)
    assert got == []
    assert code == 1
    rows = [(r.tool_name, r.phase) for r in await journal.read(saga_id)]
    assert ("echo", Phase.COMPENSATION_FAILED) in rows


async def test_a_result_holding_the_marker_string_as_a_value_reaches_the_undo(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """The marker key as a plain string or beside other keys is data, not a marker."""
    real = {"note": "$redacted", "m": {"$redacted": 1, "other": 2}, "resolved_by": "x"}
    _, (code, got) = await _rolled_back_echo(temporal_client, worker, journal, cli, real)
    assert code == 0
    assert got == [real]


# -- the halt trigger: no INTENT by the application role during a halt, whatever the statement


_COLUMNS = "(saga_id, seq, tool_name, phase, input, payload, timestamp, hash)"


def _values(row: Entry) -> tuple[Any, ...]:
    return (
        row.saga_id,
        row.seq,
        row.tool_name,
        row.phase.value,
        row.input,
        row.payload,
        row.timestamp.replace(tzinfo=None),
        row.hash,
    )


async def _copy(conn: psycopg.AsyncConnection, row: Entry) -> None:
    copying = f"COPY public.side_effect_journal {_COLUMNS} FROM STDIN"
    async with conn.cursor() as cur, cur.copy(copying) as copy:
        await copy.write_row(_values(row))


async def _insert_select(conn: psycopg.AsyncConnection, row: Entry) -> None:
    await conn.execute(
        f"INSERT INTO public.side_effect_journal {_COLUMNS}"
        " SELECT * FROM (VALUES (%s, %s::bigint, %s, %s, %s, %s, %s::timestamp, %s)) AS v",
        _values(row),
    )


async def _multi_row(conn: psycopg.AsyncConnection, row: Entry) -> None:
    """An EXECUTED row of another saga first, the INTENT second, in one statement."""
    other = first_row(phase=Phase.EXECUTED)
    await conn.execute(
        f"INSERT INTO public.side_effect_journal {_COLUMNS}"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s), (%s, %s, %s, %s, %s, %s, %s, %s)",
        (*_values(other), *_values(row)),
    )


async def _writable_cte(conn: psycopg.AsyncConnection, row: Entry) -> None:
    await conn.execute(
        f"WITH w AS (INSERT INTO public.side_effect_journal {_COLUMNS}"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING seq)"
        " SELECT count(*) FROM w",
        _values(row),
    )


async def _other_task_queue(conn: psycopg.AsyncConnection, row: Entry) -> None:
    """Naming a task queue of its own does not take a writer out of a halt of everything."""
    async with conn.transaction():
        await conn.execute("SELECT pg_catalog.set_config('sagacity.task_queue', 'elsewhere', true)")
        await insert(conn, row)


@pytest.mark.parametrize(
    "write",
    [_copy, _insert_select, _multi_row, _writable_cte, _other_task_queue],
    ids=["copy", "insert-select", "multi-row", "writable-cte", "other-task-queue"],
)
async def test_no_statement_of_the_app_role_writes_an_intent_during_a_halt(
    db: tuple[str, str], halts: HaltStore, write: Any
) -> None:
    _, app = db
    held = await halt(halts, HaltScope())
    row = first_row()
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
        with pytest.raises(psycopg.Error) as refused:
            await write(conn, row)
        assert refused.value.sqlstate == HALTED_SQLSTATE
        assert refused.value.diag.message_detail == str(held.id)
    assert await count(app, row.saga_id) == 0


@pytest.mark.parametrize(
    "statement",
    [
        # an EXECUTED row (which goes in during a halt) turned into an INTENT afterwards
        "UPDATE public.side_effect_journal SET phase = 'INTENT' WHERE phase = 'EXECUTED'",
        # a trigger of its own that runs after the gate and rewrites the row
        "CREATE TRIGGER zz_after_gate BEFORE INSERT ON public.side_effect_journal"
        " FOR EACH ROW EXECUTE FUNCTION suppress_redundant_updates_trigger()",
        "CREATE RULE sneak AS ON INSERT TO public.side_effect_journal DO INSTEAD NOTHING",
    ],
    ids=["update-phase", "own-trigger", "rule"],
)
async def test_the_app_role_cannot_make_an_intent_by_other_means(
    db: tuple[str, str], halts: HaltStore, statement: str
) -> None:
    _, app = db
    async with await psycopg.AsyncConnection.connect(app, autocommit=True) as conn:
        await insert(conn, first_row(phase=Phase.EXECUTED))
        await halt(halts, HaltScope())
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(statement)


# -- a rollback whose undo keeps failing


async def test_status_of_a_saga_whose_rollback_undo_keeps_failing_exits_4(
    start_order: StartOrder, cli: Cli, shop: Shop, temporal_client: Client
) -> None:
    """A rollback runs "with the same guarantees as any compensation": one that keeps failing
    is told apart from a slow one. `saga status --wait` of the rolled-back saga says so (exit 4
    and the failing undo). Before the fix it exited 1 at once, named the effects live and said
    to run `sagacity saga rollback` (refused: one runs), nothing of the rollback or its error."""
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    await shop.arm_fault("cancel_order", "the order service is down", times=-1)
    started = await cli("saga", "rollback", waiting.saga_id, "--attempts", "50")
    assert started.code == 0, started.stderr
    rollback = temporal_client.get_workflow_handle(rollback_id(waiting.saga_id))
    try:
        loop = asyncio.get_running_loop()
        end = loop.time() + 40
        while True:  # three failed attempts: 1 s and 2 s apart
            pending = (await rollback.describe()).raw_description.pending_activities
            if pending and pending[0].attempt >= 4:
                break
            assert loop.time() < end, pending
            await asyncio.sleep(0.5)
        status = await cli("saga", "status", waiting.saga_id, "--wait")
        assert status.code == 4, (status.stdout, status.stderr)
        said = status.stderr.splitlines()
        runs = f"a rollback of it runs (workflow {rollback_id(waiting.saga_id)}), compensating "
        assert runs + "create_order (call seq 3)" in status.stderr
        assert said[-1].startswith(
            f"saga {waiting.saga_id}: the compensation of create_order (call seq 3) has failed"
        ), said
        assert "the order service is down" in said[-1]
        # and in JSON: the saga's shape, what the rollback is at and why it keeps failing
        shown = await cli("saga", "status", waiting.saga_id, "--json")
        assert shown.code == 4, (shown.stdout, shown.stderr)
        report = shown.json()
        assert (report["state"], report["ended"]) == ("terminated", True)
        assert runs + "create_order (call seq 3)" in report["needs_attention"]
        failing = (
            f"saga {waiting.saga_id}: the compensation of create_order (call seq 3) has failed"
        )
        assert failing in report["needs_attention"]
        assert "last error: InjectedFault: the order service is down" in report["needs_attention"]
    finally:
        await rollback.terminate(reason="test done")


async def test_a_saga_terminated_mid_undo_then_rolled_back_is_undone_once(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """Terminate a saga while its own compensation runs (the undo takes 3 s; terminate does not
    stop the activity) and roll it back at once: the effect must be undone once, and the
    journal must say so. Before the fix the rollback took the seq the in-flight undo was to
    journal at, that undo's COMPENSATED row was refused, and the rollback undid it again."""
    key = new_id("slow")
    handle = await start_steps(
        temporal_client,
        worker,
        [Step(tool="slow_undo", args={"key": key}), Step(tool="decline", args={"reason": "r"})],
    )
    loop = asyncio.get_running_loop()
    end = loop.time() + 20
    while not any(
        p.activity_type.name == "sagacity.compensate"
        for p in (await handle.describe()).raw_description.pending_activities
    ):
        assert loop.time() < end, "the compensation never started"
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    await handle.terminate(reason="test: terminated mid-undo")
    done = await cli("saga", "rollback", handle.id, "--wait", "--by", "o", "--reason", "r")
    await asyncio.sleep(4)  # the terminated run's undo finishes meanwhile
    undone = sample_tools.EFFECTS.count(f"undone {key}")
    rows = [(r.tool_name, r.phase) for r in await journal.read(handle.id)]
    assert undone == 1, (undone, done, rows)
    assert rows.count(("slow_undo", Phase.COMPENSATED)) == 1, rows


async def test_a_rollback_that_was_terminated_can_be_run_again(
    start_order: StartOrder, cli: Cli, shop: Shop, temporal_client: Client
) -> None:
    """A rollback whose workflow an operator terminated (its undo kept failing) left the effects
    live: it can be started again once the cause is fixed. Before the fix `saga rollback` said
    'was rolled back already' for ever, while certify and status named the effects live."""
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    await shop.arm_fault("cancel_order", "the order service is down", times=-1)
    started = await cli("saga", "rollback", waiting.saga_id, "--attempts", "50")
    assert started.code == 0, started.stderr
    rollback = temporal_client.get_workflow_handle(rollback_id(waiting.saga_id))
    await asyncio.sleep(2)
    await rollback.terminate(reason="operator: the rollback is stuck, try again later")
    await shop.arm_fault("cancel_order", "fixed", times=0)
    certified = await cli("certify", "--saga", waiting.saga_id)
    assert certified.code == 1  # both effects still live
    again = await cli("saga", "rollback", waiting.saga_id, "--wait", "--by", "o", "--reason", "r")
    assert again.code == 0, again.stderr
    snap = await shop.snapshot()
    assert (snap.held_reservations, snap.placed_orders) == (0, 0)
    assert (await cli("certify", "--saga", waiting.saga_id)).code == 0
    assert (await cli("verify", waiting.saga_id)).code == 0
    # once it completed, it is one rollback per saga again
    third = await cli("saga", "rollback", waiting.saga_id, "--wait")
    assert third.code == 2
    assert "was rolled back already" in third.stderr


async def test_a_saga_terminated_after_continue_as_new_is_certified_live_and_rolled_back(
    temporal_client: Client, worker: Worker, journal: JournalStore, cli: Cli
) -> None:
    """Terminate a saga a few runs into its chain (continue-as-new every 50 events): certify
    judges the newest run (terminated), names every effect of every run live, and the rollback
    undoes them all from the journal, newest first, once each."""
    flags = [new_id(f"can{i}") for i in range(12)]
    handle = await temporal_client.start_workflow(
        "sagacity.Steps",
        SagaSpec(
            steps=[
                *(Step(tool="set_flag", args={"name": f}) for f in flags),
                Step(tool="slow_note", args={"text": "t", "seconds": 30}),
            ],
            options=SagaOptions(continue_as_new_events=50),
        ),
        id=new_id("can"),
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    loop = asyncio.get_running_loop()
    end = loop.time() + 60
    while not [r for r in await journal.read(handle.id) if r.tool_name == "slow_note"]:
        assert loop.time() < end, "slow_note never started"
        await asyncio.sleep(0.2)
    newest = temporal_client.get_workflow_handle(handle.id)
    described = await newest.describe()
    assert described.run_id != handle.first_execution_run_id  # it did continue as new
    await newest.terminate(reason="test")

    certified = await cli("certify", "--json", "--saga", handle.id)
    assert certified.code == 1
    assert certified.stdout.count('"live_effect"') == len(flags), certified.stdout
    done = await cli("saga", "rollback", handle.id, "--wait", "--by", "o", "--reason", "r")
    assert done.code == 0, done.stderr
    undone = [e for e in sample_tools.EFFECTS if e.startswith("unset can")]
    assert undone == [f"unset {f}" for f in reversed(flags)]
    # what is left is the SUSPECT call, a human's
    after = await cli("certify", "--json", "--saga", handle.id)
    assert after.code == 1 and '"live_effect"' not in after.stdout, after.stdout


async def test_a_worker_killed_mid_rollback_the_next_one_finishes_it_once(
    start_worker: Any, temporal_client: Client, task_queue: str, shop: Shop, cli: Cli
) -> None:
    """SIGKILL the worker process while the rollback's first undo runs (cancel_order stalled
    3 s); a new worker finishes the rollback: each effect undone once, the world as before."""
    first = await start_worker()
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=new_id("kill"),
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await wait_for(handle, awaiting_approval, timeout=60)
    await handle.terminate(reason="test")
    await shop.arm_fault("cancel_order", "", times=1, delay_s=3)  # slow, not failing
    started = await cli("saga", "rollback", handle.id, "--by", "o", "--reason", "r")
    assert started.code == 0, started.stderr
    rollback = temporal_client.get_workflow_handle(
        rollback_id(handle.id), result_type=RollbackResult
    )
    loop = asyncio.get_running_loop()
    end = loop.time() + 30
    while not (await rollback.describe()).raw_description.pending_activities or (
        await shop.fault_remaining("cancel_order")
    ):
        assert loop.time() < end, "the undo never started"
        await asyncio.sleep(0.1)
    assert first.proc is not None
    first.proc.kill()
    first.proc.wait()
    await start_worker()
    result = await asyncio.wait_for(rollback.result(), 120)
    assert result.ok and [u.tool_name for u in result.compensated] == [
        "create_order",
        "reserve_inventory",
    ]
    snap = await shop.snapshot()
    assert (snap.available["p-1"], snap.held_reservations, snap.placed_orders) == (10, 0, 0)
    assert (await cli("certify", "--saga", handle.id)).code == 0
    assert (await cli("verify", handle.id)).code == 0


async def test_an_approval_of_a_terminated_saga_runs_nothing_and_the_rollback_closes_it(
    start_order: StartOrder, cli: Cli, journal: JournalStore, approvals: Any, shop: Shop
) -> None:
    """The inbox still shows the request a terminated saga left open. Approving it must run and
    journal nothing (no workflow will act on it); the rollback then closes it and undoes."""
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    before = await journal.read(waiting.saga_id)
    approved = await cli("approvals", "approve", waiting.saga_id, str(waiting.seq), "--as", "bob")
    assert approved.code == 1, approved.stderr
    assert "has ended (terminated)" in approved.stderr
    assert await journal.read(waiting.saga_id) == before
    assert (await shop.snapshot()).outbox == 0

    done = await cli("saga", "rollback", waiting.saga_id, "--wait", "--by", "o", "--reason", "r")
    assert done.code == 0, done.stderr
    assert await approvals.get(waiting.saga_id, waiting.seq) is None
    again = await cli("approvals", "approve", waiting.saga_id, str(waiting.seq), "--as", "bob")
    assert again.code != 0
    assert (await cli("certify", "--saga", waiting.saga_id)).code == 0
