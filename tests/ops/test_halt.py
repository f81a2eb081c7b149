"""The kill switch on real Temporal and Postgres, with two ``sagacity worker`` processes.

``sagacity halt`` must stop every new side effect at once (no INTENT after the halt, whatever a
worker knows), report exactly what is live, and let held sagas finish after ``resume``; with
the ``compensate`` policy it undoes what can be undone; a quarantine freezes one saga,
compensations included. Bad input changes nothing.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity.journal import Phase
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaResult, SagaState, SagaStatus
from tests.halts import lift_all
from tests.ops.conftest import Cli, CliResult, StartWorker, signed_approval
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

Handle = WorkflowHandle[Any, SagaResult]


@pytest.fixture(autouse=True)
async def _lift_halts(owner_database_url: str) -> AsyncIterator[None]:
    yield
    await lift_all(owner_database_url)


@pytest.fixture
def operator_env(settings: Settings, owner_database_url: str) -> dict[str, str]:
    """An operator's environment: the tables' owner, alice's key, the session's keyring."""
    assert settings.approver_key is not None and settings.keyring is not None
    return {
        "SAGACITY_OWNER_DATABASE_URL": owner_database_url,
        "SAGACITY_APPROVER_KEY": str(settings.approver_key),
        "SAGACITY_KEYRING": str(settings.keyring),
    }


async def stock(shop: Shop, available: int = 1000) -> None:
    async with shop.pool.connection() as conn:
        await conn.execute("UPDATE inventory SET available = %s", (available,))


async def start_orders(client: Client, task_queue: str, n: int) -> list[Handle]:
    return list(
        await asyncio.gather(
            *(
                client.start_workflow(
                    "order.PlaceOrder",
                    OrderRequest(quantity=1),
                    id=f"halt-{uuid.uuid4().hex[:10]}",
                    task_queue=task_queue,
                    result_type=SagaResult,
                )
                for _ in range(n)
            )
        )
    )


async def thirty_in_flight(
    start_worker: StartWorker, client: Client, task_queue: str, shop: Shop
) -> tuple[list[Handle], list[Handle]]:
    """Two workers; ten sagas waiting at their approval gate, and twenty in the middle of a slow
    first call: (the waiting, the moving)."""
    await stock(shop)
    await start_worker()
    await start_worker()
    gated = await start_orders(client, task_queue, 10)
    await until(gated, {SagaState.AWAITING_APPROVAL}, timeout=60)
    await shop.arm_fault("reserve_inventory", "", times=20, delay_s=2.0)
    moving = await start_orders(client, task_queue, 20)
    for handle in moving:
        await wait_for(handle, lambda s: s.running == "reserve_inventory", timeout=30)
    return gated, moving


async def all_status(handles: list[Handle]) -> dict[str, SagaStatus]:
    statuses = await asyncio.gather(*(h.query("status", result_type=SagaStatus) for h in handles))
    return {h.id: s for h, s in zip(handles, statuses, strict=True)}


async def until(handles: list[Handle], states: set[SagaState], timeout: float) -> float:
    """Seconds until every saga is in one of ``states``; fails after ``timeout``."""
    loop = asyncio.get_running_loop()
    start = loop.time()
    while True:
        found = await all_status(handles)
        if all(s.state in states for s in found.values()):
            return loop.time() - start
        if loop.time() - start > timeout:
            late = {k: v.state for k, v in found.items() if v.state not in states}
            raise AssertionError(f"after {timeout}s still: {late}")
        await asyncio.sleep(0.2)


async def intents_after(journal: JournalStore, sagas: list[str], moment: datetime) -> list[str]:
    late = []
    for sid in sagas:
        for row in await journal.read(sid):
            if row.phase is Phase.INTENT and row.timestamp > moment:
                late.append(f"{sid} seq {row.seq} {row.tool_name}")
    return late


async def live_in_shop(shop: Shop, sagas: list[str]) -> set[tuple[str, str]]:
    """(saga, tool) of every effect the shop holds for ``sagas``."""
    async with shop.pool.connection() as conn:
        rows = await (
            await conn.execute(
                "SELECT saga_id, 'reserve_inventory' FROM reservations WHERE status = 'held' "
                "AND saga_id = ANY(%(s)s) UNION ALL "
                "SELECT saga_id, 'create_order' FROM orders WHERE status = 'placed' "
                "AND saga_id = ANY(%(s)s) UNION ALL "
                "SELECT saga_id, 'send_confirmation' FROM outbox WHERE saga_id = ANY(%(s)s)",
                {"s": sagas},
            )
        ).fetchall()
    return {(str(r[0]), str(r[1])) for r in rows}


def parsed(result: CliResult) -> Any:
    assert result.code == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


async def approve_all(settings: Settings, handles: list[Handle]) -> None:
    for sid, status in (await all_status(handles)).items():
        if status.pending_approval is not None:
            handle = next(h for h in handles if h.id == sid)
            await handle.signal(
                "approve", signed_approval(settings, sid, status.pending_approval, "alice")
            )


async def test_halt_holds_30_sagas_on_two_workers_reports_the_live_effects_and_resume_finishes_them(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    settings: Settings,
    sagacity: Cli,
    operator_env: dict[str, str],
) -> None:
    gated, moving = await thirty_in_flight(start_worker, temporal_client, task_queue, shop)
    everyone = gated + moving
    ids = [h.id for h in everyone]

    halted = parsed(
        await sagacity(
            "halt", "--reason", "agent loops on orders", "--json", extra_env=operator_env
        )
    )
    halted_at = datetime.fromisoformat(halted["halted_at"])
    assert halted["signed"] is True

    # every saga stops within 5 s of the halt: the moving ones held before their next call,
    # the gated ones still waiting for a human
    took = await until(moving, {SagaState.HALTED}, timeout=5)
    assert took < 5
    assert {s.state for s in (await all_status(gated)).values()} == {SagaState.AWAITING_APPROVAL}
    status = (await all_status(moving))[moving[0].id]
    assert status.halted is not None and status.halted.halt_id == halted["halt_id"]

    # the report lists exactly what the shop holds
    # (a halt of everything reaches whatever else runs in the namespace too: other tests' sagas)
    report = halted["report"]
    assert set(ids) <= set(report["sagas"])
    ours = [e for e in report["live"] if e["saga_id"] in ids]
    reported = {(e["saga_id"], e["tool"]) for e in ours}
    assert {e["state"] for e in ours} == {"executed"}
    assert reported == await live_in_shop(shop, ids)
    assert len(reported) == 10 * 2 + 20

    # an approval during the halt is taken, but the call it approves waits too
    await approve_all(settings, gated[:3])
    await until(gated[:3], {SagaState.HALTED}, timeout=10)
    await asyncio.sleep(1)
    assert await intents_after(journal, ids, halted_at) == []

    listed = parsed(await sagacity("halts", "--json", extra_env=operator_env))
    assert [h["id"] for h in listed] == [halted["halt_id"]]
    assert listed[0]["problems"] == [] and listed[0]["live_effects"] == len(report["live"])

    resumed = await sagacity(
        "resume", str(halted["halt_id"]), "--reason", "loop fixed", extra_env=operator_env
    )
    assert resumed.code == 0, resumed.stderr
    assert f"halt {halted['halt_id']} lifted by alice" in resumed.stdout
    await until(moving, {SagaState.AWAITING_APPROVAL}, timeout=30)
    await approve_all(settings, everyone)
    results = await asyncio.gather(*(h.result() for h in everyone))
    assert {r.status for r in results} == {SagaState.COMPLETED}
    assert len(await live_in_shop(shop, ids)) == 30 * 3
    for sid in ids:
        assert (await journal.verify(sid)).ok
    assert parsed(await sagacity("halts", "--json", extra_env=operator_env)) == []


async def test_halt_with_compensate_undoes_reversible_effects_and_approved_calls_never_run(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    settings: Settings,
    sagacity: Cli,
    operator_env: dict[str, str],
) -> None:
    gated, moving = await thirty_in_flight(start_worker, temporal_client, task_queue, shop)
    ids = [h.id for h in gated + moving]

    halted = parsed(
        await sagacity(
            "halt",
            "--task-queue",
            task_queue,
            "--policy",
            "compensate",
            "--reason",
            "bad prices",
            "--json",
            extra_env=operator_env,
        )
    )
    assert sorted(halted["signalled"]) == sorted(ids)
    # the moving sagas abort and undo what they did; the gated ones keep waiting
    results = await asyncio.gather(*(h.result() for h in moving))
    assert {r.status for r in results} == {SagaState.ABORTED}
    assert {s.state for s in (await all_status(gated)).values()} == {SagaState.AWAITING_APPROVAL}
    assert await live_in_shop(shop, [h.id for h in moving]) == set()
    # approved during the halt, the irreversible call never runs: the saga aborts instead
    await approve_all(settings, gated)
    results = await asyncio.gather(*(h.result() for h in gated))
    assert {r.status for r in results} == {SagaState.ABORTED}
    assert await live_in_shop(shop, ids) == set()
    for sid in ids:
        rows = await journal.read(sid)
        assert not any(r.tool_name == "send_confirmation" and r.phase is Phase.INTENT for r in rows)
        assert (await journal.verify(sid)).ok


async def test_quarantine_freezes_one_saga_compensations_included_until_released(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    settings: Settings,
    sagacity: Cli,
    operator_env: dict[str, str],
) -> None:
    await start_worker()
    frozen, other = await start_orders(temporal_client, task_queue, 2)
    await until([frozen, other], {SagaState.AWAITING_APPROVAL}, timeout=60)

    done = await sagacity(
        "saga", "quarantine", frozen.id, "--reason", "investigating", extra_env=operator_env
    )
    assert done.code == 0, done.stderr
    assert f"saga {frozen.id} quarantined" in done.stdout
    # an abort of the quarantined saga compensates nothing until it is released ...
    await frozen.signal("abort", {"reason": "wrong customer", "by": "alice"})
    await wait_for(frozen, lambda s: s.state is SagaState.HALTED, timeout=15)
    assert await live_in_shop(shop, [frozen.id]) == {
        (frozen.id, "reserve_inventory"),
        (frozen.id, "create_order"),
    }
    # ... while another saga goes on
    await approve_all(settings, [other])
    assert (await other.result()).status is SagaState.COMPLETED

    released = await sagacity(
        "saga", "release", frozen.id, "--reason", "cleared", extra_env=operator_env
    )
    assert released.code == 0, released.stderr
    assert (await frozen.result()).status is SagaState.ABORTED
    assert await live_in_shop(shop, [frozen.id]) == set()
    assert (await journal.verify(frozen.id)).ok


async def test_halt_by_tool_holds_only_that_tool_without_telling_any_saga(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    shop: Shop,
    sagacity: Cli,
    operator_env: dict[str, str],
) -> None:
    # no signal reaches the sagas: the check where INTENT is written holds them alone
    await start_worker()
    halted = parsed(
        await sagacity(
            "halt",
            "--tool",
            "create_order",
            "--reason",
            "db migration",
            "--json",
            extra_env=operator_env,
        )
    )
    assert halted["signalled"] == []
    (handle,) = await start_orders(temporal_client, task_queue, 1)
    status = await wait_for(handle, lambda s: s.state is SagaState.HALTED, timeout=15)
    assert status.halted is not None and status.halted.policy == "keep"
    shown = await sagacity("saga", "status", handle.id)
    assert f"held by: halt {halted['halt_id']} by alice (keep): db migration" in shown.stdout
    assert await live_in_shop(shop, [handle.id]) == {(handle.id, "reserve_inventory")}
    resumed = await sagacity("resume", "--all", "--reason", "done", extra_env=operator_env)
    assert resumed.code == 0, resumed.stderr
    await wait_for(handle, awaiting_approval, timeout=30)


@pytest.mark.parametrize(
    ("args", "needs"),
    [
        (["halt", "--reason", "x", "--policy", "explode"], "--policy must be keep or compensate"),
        (["halt", "--reason", ""], "reason must be plain"),
        (["halt", "--reason", "bad\x00byte"], "reason must be plain"),
        (["halt", "--reason", "x", "--as", "a" * 300], "operator must be plain"),
        (["halt", "--reason", "x", "--tool", " "], "tool must be a plain"),
        (["halt", "--reason", "x", "--search", "NoSuchAttribute = 'x'"], "was refused"),
        (["halt", "--reason", "x", "--task-queue", 'q"x'], "quotes"),
        (["resume", "999999", "--reason", "x"], "no active halt 999999"),
        (["resume", "--reason", "x"], "name one halt, or --all"),
        (["saga", "release", "no-such-saga", "--reason", "x"], "is not quarantined"),
        (["halt", "--reason", "x", "--as", "mallory"], "may not sign for 'mallory'"),
    ],
)
async def test_bad_halt_input_is_refused_and_changes_nothing(
    sagacity: Cli, operator_env: dict[str, str], args: list[str], needs: str
) -> None:
    before = await sagacity("halts", "--all", "--json", extra_env=operator_env)
    result = await sagacity(*args, extra_env=operator_env)
    assert result.code == 2, result.stdout + result.stderr
    assert needs in result.stderr
    assert "Traceback" not in result.stderr
    after = await sagacity("halts", "--all", "--json", extra_env=operator_env)
    assert after.stdout == before.stdout


async def test_a_worker_login_may_not_halt(sagacity: Cli, operator_env: dict[str, str]) -> None:
    # the app role only reads halts: a compromised worker can neither halt nor lift
    before = parsed(await sagacity("halts", "--all", "--json", extra_env=operator_env))
    env = {**operator_env, "SAGACITY_OWNER_DATABASE_URL": ""}
    result = await sagacity("halt", "--reason", "x", extra_env=env)
    assert result.code == 1
    assert "may not write halts" in result.stderr and "SAGACITY_OWNER_DATABASE_URL" in result.stderr
    assert parsed(await sagacity("halts", "--all", "--json", extra_env=operator_env)) == before
