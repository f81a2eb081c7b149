"""``sagacity demo``, run the way a user runs it, against the test stack."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from sagacity.cli._demo import DemoReport, run_demo
from sagacity.devstack import Endpoints
from sagacity.settings import Settings
from tests.temporal.test_order_saga import START
from workflows.order.shop import Shop

REPO = Path(__file__).resolve().parents[2]


async def test_demo_command_undoes_the_order_and_verifies_the_chain(
    endpoints: Endpoints, database_url: str, shop: Shop
) -> None:
    env = {
        **os.environ,
        "SAGACITY_DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": endpoints.temporal_address,
        "SAGACITY_TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
    }
    env.pop("OPENAI_API_KEY", None)
    done = subprocess.run(
        # the console script `make demo` runs
        [str(Path(sys.executable).with_name("sagacity")), "demo", "--json"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    report = DemoReport.model_validate(json.loads(done.stdout))
    # it said what it was doing, on stderr
    assert "approving as demo-approver" in done.stderr

    assert report.result.saga.status.value == "compensated"
    assert [a.tool for a in report.approvals] == ["send_confirmation"]
    assert [s.status for s in report.result.steps] == ["executed", "executed", "failed"]
    assert [e.tool_name for e in report.result.saga.compensated] == [
        "create_order",
        "reserve_inventory",
    ]
    assert [r.phase for r in report.journal][-3:] == ["FAILED", "COMPENSATED", "COMPENSATED"]
    assert report.verification.ok and report.verification.rows == len(report.journal) == 10
    assert report.before == report.after and report.restored
    assert report.after["available"] == START
    assert not report.shop_reset  # a database it was given is not its own to reset
    assert "side_effect_journal" in report.tables

    # act two: worker 1 was killed in the middle of reserve_stock, worker 2 finished the saga
    act = report.recovery
    assert act is not None
    assert f"worker 1 (pid {act.killed_pid}) killed with SIGKILL during reserve_stock" in (
        done.stderr
    )
    assert f"worker 2 started (pid {act.fresh_pid})" in done.stderr
    assert "s after the kill: completed, journal verified, 4 rows" in done.stderr
    assert act.killed_pid != act.fresh_pid and act.killed_seq == 1
    assert act.status == "completed"
    # the call the dead worker left without an outcome was retried, and ran there
    assert act.retried_by_fresh and act.attempt == 2
    # one INTENT per call: the retry wrote the outcome of the same journaled call
    assert [(r.tool, r.phase) for r in act.journal] == [
        ("reserve_stock", "INTENT"),
        ("reserve_stock", "EXECUTED"),
        ("create_order", "INTENT"),
        ("create_order", "EXECUTED"),
    ]
    assert act.verification.ok and act.verification.rows == 4
    # no call ran twice: one reservation, one order, the stock down by one unit once
    assert (act.reservations, act.orders) == (1, 1)
    assert act.stock_before - act.stock_after == 1 and act.ran_once
    reserved = json.loads(act.journal[1].payload)["reservation_id"]
    assert json.loads(act.journal[2].input)["reservation_id"] == reserved


async def test_demo_without_fault_places_the_order(
    settings: Settings, endpoints: Endpoints, database_url: str, shop: Shop
) -> None:
    given = settings.model_copy(
        update={"database_url": database_url, "temporal_address": endpoints.temporal_address}
    )
    said: list[str] = []
    report = await run_demo(given, fault=False, crash=False, say=said.append)

    assert report.result.saga.status.value == "completed"
    assert report.fault is None and not report.restored
    assert report.after["available"]["p-1"] == START["p-1"] - 2
    assert report.after["placed_orders"] == 1 and report.after["outbox"] == 1
    assert report.result.final_output is not None and "is placed" in report.result.final_output
    assert report.verification.ok and report.verification.rows == 8
    assert any("waits for a human" in line for line in said)
    assert report.recovery is None
