"""``sagacity saga rollback``: an operator undoes what a terminated saga left live (which certify,
reconcile and status name), journaled in its own chain, after which certify and reconcile pass
it; refused (exit 2) for a saga still running, one its engine ended and one rolled back already;
exit 1 when a compensation fails every attempt; held by a halt until it is lifted. Real Temporal, real Postgres, the installed
command."""

from __future__ import annotations

import asyncio
import json

from temporalio.client import Client

from sagacity.journal import APPROVAL_GATE, ROLLBACK, Phase
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import Approve, SagaState
from sagacity.temporal.rollback import RollbackResult, rollback_id
from tests.approvals.conftest import Cli, StartOrder
from tests.halts import lift_all
from workflows.order.shop import Shop


async def test_rollback_of_a_terminated_saga_undoes_its_effects_and_certify_passes_it(
    start_order: StartOrder,
    cli: Cli,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test: an operator's terminate")
    refused = await cli("certify", "--saga", waiting.saga_id)
    assert refused.code == 1
    assert "reserve_inventory (call seq 1) took effect" in refused.stdout
    status = await cli("saga", "status", waiting.saga_id)
    assert status.code == 1
    assert "create_order (call seq 3) took effect" in status.stderr
    drift = await cli("reconcile", waiting.saga_id, "--app", "workflows.order.app")
    assert drift.code == 1, drift.stderr
    assert f"saga {waiting.saga_id}: create_order (call seq 3) took effect" in drift.stdout

    done = await cli(
        "saga", "rollback", waiting.saga_id, "--reason", "stuck order", "--by", "ops-ann",
        "--wait", "--json",
    )  # fmt: skip
    assert done.code == 0, done.stderr
    result = done.json()
    assert [(u["tool_name"], u["call_seq"]) for u in result["compensated"]] == [
        ("create_order", 3),
        ("reserve_inventory", 1),
    ]

    # the world is as before the saga; the request it left waiting is gone
    snap = await shop.snapshot()
    assert (snap.available["p-1"], snap.held_reservations, snap.placed_orders) == (10, 0, 0)
    assert await approvals.get(waiting.saga_id, waiting.seq) is None
    # journaled in the saga's own chain: the open request closed, who and why, each undo
    rows = (await journal.read(waiting.saga_id))[waiting.seq :]
    assert [(r.tool_name, r.phase) for r in rows] == [
        (APPROVAL_GATE, Phase.REJECTED),
        (ROLLBACK, Phase.REJECTED),
        ("create_order", Phase.COMPENSATED),
        ("reserve_inventory", Phase.COMPENSATED),
    ]
    said = json.loads(rows[1].payload)
    assert (said["by"], said["reason"], said["workflow_id"]) == (
        "ops-ann",
        "stuck order",
        rollback_id(waiting.saga_id),
    )
    assert (await cli("certify", "--saga", waiting.saga_id)).code == 0
    settled = await cli("reconcile", waiting.saga_id, "--app", "workflows.order.app")
    assert settled.code == 0, settled.stdout
    assert (await cli("verify", waiting.saga_id)).code == 0

    again = await cli("saga", "rollback", waiting.saga_id, "--wait")
    assert again.code == 2
    assert again.stderr.strip().splitlines() == [
        f"error: saga {waiting.saga_id} was rolled back already, by ops-ann"
    ]


async def test_rollback_refuses_a_running_saga_and_one_that_left_nothing_live(
    start_order: StartOrder, cli: Cli
) -> None:
    waiting = await start_order()
    running = await cli("saga", "rollback", waiting.saga_id)
    assert running.code == 2
    assert "is still running: abort it" in running.stderr
    assert len(running.stderr.strip().splitlines()) == 1

    await waiting.handle.signal("approve", Approve(journal_seq=waiting.seq, approver="alice"))
    assert (await waiting.handle.result()).status is SagaState.COMPLETED
    completed = await cli("saga", "rollback", waiting.saga_id)
    assert completed.code == 2
    assert f"saga {waiting.saga_id} completed as its own engine ended it" in completed.stderr

    unknown = await cli("saga", "rollback", "no-such-saga")
    assert unknown.code == 2


async def test_a_compensation_that_fails_every_attempt_exits_1_and_is_flagged(
    start_order: StartOrder, cli: Cli, journal: JournalStore, shop: Shop
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    await shop.arm_fault("cancel_order", "the order service is down", times=-1)

    done = await cli("saga", "rollback", waiting.saga_id, "--attempts", "2", "--wait")
    assert done.code == 1, done.stderr
    assert "COMPENSATION FAILED: create_order (call seq 3)" in done.stdout
    # the rest is still undone, and the failure is a human's now
    rows = await journal.read(waiting.saga_id)
    assert [(r.tool_name, r.phase) for r in rows[-2:]] == [
        ("create_order", Phase.COMPENSATION_FAILED),
        ("reserve_inventory", Phase.COMPENSATED),
    ]
    certified = await cli("certify", "--json", "--saga", waiting.saga_id)
    assert certified.code == 1
    kinds = [f["kind"] for f in json.loads(certified.stdout)["findings"]]
    assert kinds == ["compensation_failed"]


async def test_two_rollbacks_at_once_run_one(
    start_order: StartOrder, cli: Cli, journal: JournalStore, shop: Shop
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")

    both = await asyncio.gather(
        *(cli("saga", "rollback", waiting.saga_id, "--by", by, "--wait") for by in ("ann", "bo"))
    )
    assert sorted(done.code for done in both) == [0, 2], [d.stderr for d in both]
    # one rollback row, one undo per effect: the second was refused, not run beside the first
    rows = await journal.read(waiting.saga_id)
    assert [r.tool_name for r in rows].count(ROLLBACK) == 1
    assert [r.phase for r in rows].count(Phase.COMPENSATED) == 2
    assert (await shop.snapshot()).placed_orders == 0


async def test_a_halt_holds_the_rollback_until_it_is_lifted(
    start_order: StartOrder,
    cli: Cli,
    journal: JournalStore,
    shop: Shop,
    temporal_client: Client,
    owner_database_url: str,
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    operator = {"SAGACITY_OWNER_DATABASE_URL": owner_database_url}
    try:
        halted = await cli("halt", "--reason", "hold everything", extra_env=operator)
        assert halted.code == 0, halted.stderr
        started = await cli("saga", "rollback", waiting.saga_id)
        assert started.code == 0, started.stderr
        # who and why are journaled; no compensation runs while the halt is in force
        await asyncio.sleep(3)
        rows = await journal.read(waiting.saga_id)
        assert rows[-1].tool_name == ROLLBACK
        assert (await shop.snapshot()).placed_orders == 1

        resumed = await cli("resume", "--all", "--reason", "go on", extra_env=operator)
        assert resumed.code == 0, resumed.stderr
    finally:
        await lift_all(owner_database_url)
    handle = temporal_client.get_workflow_handle(
        rollback_id(waiting.saga_id), result_type=RollbackResult
    )
    # the lifting's signal wakes it at once, not at its next look (30 s on)
    result = await asyncio.wait_for(handle.result(), 20)
    assert result.ok and len(result.compensated) == 2
    assert (await shop.snapshot()).placed_orders == 0
