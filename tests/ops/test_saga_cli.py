"""``sagacity saga start/status/abort/journal`` as a person types them, against a real worker."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import psycopg
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.journal import Draft, Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import Decision, SagaResult
from tests.ops.conftest import Cli
from tests.temporal.conftest import phases, wait_for
from workflows.order.shop import Shop


async def test_start_wait_status_approve_and_journal(
    sagacity: Cli, worker: Worker, temporal_client: Client, journal: JournalStore, shop: Shop
) -> None:
    queue = {"SAGACITY_TASK_QUEUE": worker.task_queue}
    started = await sagacity("saga", "start", "--order", "p-1:2", "--wait", extra_env=queue)
    assert started.code == 0, started.stderr
    saga = started.stdout.strip()
    assert saga.startswith("order-")
    assert f"started order.PlaceOrder as {saga}" in started.stderr
    assert "awaits approval: send_confirmation at journal seq 5" in started.stderr

    status = await sagacity("saga", "status", saga, "--json")
    assert status.code == 0, status.stderr
    assert status.json()["state"] == "awaiting_approval"
    assert status.json()["pending_approval"]["journal_seq"] == 5

    decided = await temporal_client.get_workflow_handle(saga).execute_update(
        "decide", Decision(journal_seq=5, approver="alice", approve=True), result_type=str
    )
    assert decided == "approved"
    done = await sagacity("saga", "status", saga, "--wait")
    table = await sagacity("saga", "journal", saga)
    assert done.code == 0 and f"saga {saga}: completed (journal head seq 8)" in done.stdout

    rows = await journal.read(saga)
    assert table.code == 0, table.stderr
    assert f"chain verified: 8 rows, head seq 8 hash {rows[-1].hash}" in table.stdout
    assert all(row.hash[:12] in table.stdout for row in rows)
    assert "approver=alice" in table.stdout

    as_json = (await sagacity("saga", "journal", saga, "--json")).json()
    assert [r["hash"] for r in as_json["rows"]] == [r.hash for r in rows]
    assert [r["phase"] for r in as_json["rows"]][-2:] == ["INTENT", "EXECUTED"]
    assert as_json["verdict"] == {
        "ok": True,
        "rows": 8,
        "head_seq": 8,
        "head_hash": rows[-1].hash,
        "problem": None,
    }


async def test_abort_compensates_what_ran(
    sagacity: Cli, worker: Worker, temporal_client: Client, journal: JournalStore, shop: Shop
) -> None:
    await shop.arm_fault("create_order", "", delay_s=1.5)  # slow, so there is time to abort
    queue = {"SAGACITY_TASK_QUEUE": worker.task_queue}
    started = await sagacity(
        "saga",
        "start",
        "--order",
        "p-2:4",
        "--id",
        f"abort-{uuid.uuid4().hex[:6]}",
        extra_env=queue,
    )
    assert started.code == 0, started.stderr
    saga = started.stdout.strip()
    handle = temporal_client.get_workflow_handle(saga, result_type=SagaResult)
    await wait_for(handle, lambda s: s.running == "create_order")

    aborted = await sagacity(
        "saga", "abort", saga, "--reason", "customer changed their mind", "--by", "carol", "--wait"
    )
    assert aborted.code == 1, aborted.stderr  # the saga did not complete: it was undone
    assert f"saga {saga}: aborted" in aborted.stdout
    assert "customer changed their mind" in aborted.stdout
    assert "undone: create_order, reserve_inventory" in aborted.stdout
    assert (await phases(journal, saga))[-2:] == [
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    again = await sagacity("saga", "abort", saga, "--reason", "twice")
    assert again.code == 1 and "already ended: aborted" in again.stderr
    assert (await shop.snapshot()).available["p-2"] == 25


async def test_steps_file_runs_the_generic_saga(
    sagacity: Cli, worker: Worker, shop: Shop, tmp_path: Path
) -> None:
    steps = tmp_path / "steps.json"
    steps.write_text(
        json.dumps(
            [
                {"tool": "reserve_inventory", "args": {"product_id": "p-1", "quantity": 3}},
                {
                    "tool": "reserve_inventory",
                    "id": "too_many",
                    "args": {"product_id": "p-2", "quantity": 999},
                },
            ]
        )
    )
    ran = await sagacity(
        "saga",
        "start",
        "--steps",
        str(steps),
        "--wait",
        "--json",
        extra_env={"SAGACITY_TASK_QUEUE": worker.task_queue},
    )
    assert ran.code == 1, ran.stderr
    result = ran.json()
    assert result["status"] == "compensated"
    assert "cannot reserve 999" in result["error"]["message"]
    assert [e["tool_name"] for e in result["compensated"]] == ["reserve_inventory"]
    assert (await shop.snapshot()).available == {"p-1": 10, "p-2": 25}


async def test_usage_errors_exit_2_and_say_what_to_do(sagacity: Cli, tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.json")
    runs = await asyncio.gather(
        sagacity("saga", "start"),
        sagacity("saga", "start", "--order", "p-1"),
        sagacity("saga", "start", "--order", "p-1:1", "--steps", missing),
        sagacity("saga", "start", "--steps", missing),
        sagacity("saga", "status", "no-such-saga"),
        sagacity("saga", "journal", "no-such-saga"),
    )
    said = [
        "give one of --steps FILE.json or --order PRODUCT:QUANTITY",
        "--order expects PRODUCT:QUANTITY, e.g. p-1:2; got 'p-1'",
        "give one of --steps FILE.json or --order PRODUCT:QUANTITY",
        f"--steps {missing}",
        "no saga 'no-such-saga'",
        "saga 'no-such-saga' has no journal rows",
    ]
    for run, message in zip(runs, said, strict=True):
        assert run.code == 2 and message in run.stderr, (run.code, run.stderr)


async def test_journal_shows_where_an_edited_chain_breaks(
    sagacity: Cli, journal: JournalStore, database_url: str
) -> None:
    saga = f"edited-{uuid.uuid4().hex[:6]}"
    for phase, payload in [(Phase.INTENT, ""), (Phase.EXECUTED, '{"refund":10}')]:
        await journal.append(Draft(saga, "refund", phase, '{"amount":10}', payload))
    await journal.append(Draft(saga, "refund", Phase.COMPENSATED, '{"amount":10}'))
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        await conn.execute(
            "UPDATE side_effect_journal SET payload = %s WHERE saga_id = %s AND seq = 2",
            ('{"refund":1000}', saga),
        )
    shown = await sagacity("saga", "journal", saga)
    assert shown.code == 1
    assert "chain BROKEN at seq 2: hash_mismatch" in shown.stdout
    assert "(verified up to seq 1)" in shown.stdout
