"""``sagacity saga start/status/abort/journal`` as a person types them, against a real worker."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import psycopg
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.journal import Draft, Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import Decision, SagaResult, SagaState, SagaStatus
from tests.approvals.conftest import MakeSuspects
from tests.ops.conftest import Cli
from tests.temporal.conftest import awaiting_approval, phases, wait_for
from workflows.order.shop import Shop

CHAIN_ONLY_TAIL = "a cut tail or a recomputed chain is not detectable without anchors"


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
    assert f"(hash chain only: {CHAIN_ONLY_TAIL}): 8 rows, head seq 8 hash {rows[-1].hash}" in (
        table.stdout
    )
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
        "dangling_intents": [],
        "anchored": False,
        "anchors": [],
    }
    assert [r["saga_id"] for r in as_json["rows"]] == [saga] * 8


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
    # one id, one journal: the closed saga's id is not started again
    rows = await journal.read(saga)
    reused = await sagacity("saga", "start", "--order", "p-2:1", "--id", saga, extra_env=queue)
    assert reused.code == 2
    assert f"a saga with id {saga!r} already exists (one id names one journal)" in reused.stderr
    assert await journal.read(saga) == rows


async def test_abort_dry_run_says_what_the_abort_then_does(
    sagacity: Cli, worker: Worker, temporal_client: Client, journal: JournalStore, tmp_path: Path
) -> None:
    steps = tmp_path / "steps.json"
    steps.write_text(
        json.dumps(
            [
                {"tool": "set_flag", "args": {"name": "dry"}},  # REVERSIBLE
                {"tool": "post_notice", "args": {"text": "dry"}},  # COMPENSATABLE
                {"tool": "wire", "id": "w1", "args": {"amount": 5, "api_token": "t"}},
                {"tool": "wire", "id": "w2", "args": {"amount": 6, "api_token": "t"}},
            ]
        )
    )
    queue = {"SAGACITY_TASK_QUEUE": worker.task_queue}
    saga = f"dry-{uuid.uuid4().hex[:6]}"
    started = await sagacity("saga", "start", "--steps", str(steps), "--id", saga, extra_env=queue)
    assert started.code == 0, started.stderr
    handle = temporal_client.get_workflow_handle(saga, result_type=SagaResult)
    first = await wait_for(handle, awaiting_approval)
    assert first.pending_approval is not None and first.pending_approval.journal_seq == 5
    await handle.execute_update(
        "decide", Decision(journal_seq=5, approver="alice", approve=True), result_type=str
    )
    # the first wire ran; the second waits at its own gate, with three effects behind it
    await wait_for(
        handle, lambda s: s.pending_approval is not None and s.pending_approval.journal_seq == 9
    )
    rows = await journal.read(saga)
    signals = await _signals(handle)

    planned = await sagacity("saga", "abort", saga, "--dry-run", "--json")
    assert planned.code == 0, planned.stderr
    plan = planned.json()
    assert [(c["tool_name"], c["seq"], c["reversibility"]) for c in plan["compensate"]] == [
        ("post_notice", 3, "COMPENSATABLE"),
        ("set_flag", 1, "REVERSIBLE"),
    ]
    assert [(c["tool_name"], c["seq"], c["why"]) for c in plan["stays_live"]] == [
        ("wire", 7, "nothing undoes it")
    ]
    assert plan["awaiting_approval"] == {"seq": 9, "tool_name": "wire"}
    assert (plan["state"], plan["ended"], plan["dry_run"]) == ("awaiting_approval", False, True)
    table = await sagacity("saga", "abort", saga, "--dry-run")
    assert table.code == 0, table.stderr
    lines = table.stdout.splitlines()
    assert f"saga {saga}: awaiting_approval; an abort would compensate, newest first:" in lines
    (post,) = [line for line in lines if "post_notice" in line]
    (flag,) = [line for line in lines if "set_flag" in line]
    (wired,) = [line for line in lines if "│ wire" in line]
    assert lines.index(post) < lines.index(flag) < lines.index(wired)
    assert "│ 1 " in post and "compensated" in post and "│ 2 " in flag
    assert "IRREVERSIBLE" in wired and "stays live: nothing undoes it" in wired
    assert "wire waits for approval at seq 9: aborted, it never runs" in table.stdout
    assert "nothing was sent to the saga and nothing was written" in table.stdout
    # nothing was sent, nothing written
    assert await journal.read(saga) == rows
    assert await _signals(handle) == signals
    assert (await handle.query("status", result_type=SagaStatus)).state.value == (
        "awaiting_approval"
    )

    aborted = await sagacity("saga", "abort", saga, "--reason", "dry run checked", "--wait")
    assert aborted.code == 1 and f"saga {saga}: aborted" in aborted.stdout
    assert await _signals(handle) == signals + 1  # the real abort is a signal
    undone = [
        (r.tool_name, r.input) for r in await journal.read(saga) if r.phase is Phase.COMPENSATED
    ]
    by_seq = {r.seq: (r.tool_name, r.input) for r in rows}
    assert undone == [by_seq[c["seq"]] for c in plan["compensate"]]

    ended = await sagacity("saga", "abort", saga, "--dry-run", "--json")
    assert ended.code == 1, ended.stderr
    after = ended.json()
    assert (after["ended"], after["state"], after["compensate"]) == (True, "aborted", [])
    assert [(c["tool_name"], c["seq"]) for c in after["stays_live"]] == [("wire", 7)]
    assert [c["seq"] for c in after["already_compensated"]] == [3, 1]
    said = await sagacity("saga", "abort", saga, "--dry-run")
    assert f"saga {saga} already ended: aborted; an abort would compensate nothing" in said.stdout


async def _signals(handle: WorkflowHandle[Any, Any]) -> int:
    """How many signals the saga's history holds."""
    return sum(
        [
            e.HasField("workflow_execution_signaled_event_attributes")
            async for e in handle.fetch_history_events()
        ]
    )


async def test_abort_dry_run_refuses_bad_input_in_one_line(sagacity: Cli) -> None:
    unknown = await sagacity("saga", "abort", "no-such-saga", "--dry-run")
    assert unknown.code == 2 and "no saga 'no-such-saga'" in unknown.stderr
    bad = await sagacity("saga", "abort", "bad\x01id", "--dry-run")
    assert bad.code == 2 and "saga id 'bad" in bad.stderr and "control character" in bad.stderr
    no_reason = await sagacity("saga", "abort", "no-such-saga")
    assert no_reason.code == 2 and "--reason is required" in no_reason.stderr
    for run in (unknown, bad, no_reason):
        assert "Traceback" not in run.stderr


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
    assert result["state"] == "compensated"
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
    sagacity: Cli, journal: JournalStore, owner_database_url: str
) -> None:
    saga = f"edited-{uuid.uuid4().hex[:6]}"
    for phase, payload in [(Phase.INTENT, ""), (Phase.EXECUTED, '{"refund":10}')]:
        await journal.append(Draft(saga, "refund", phase, '{"amount":10}', payload))
    await journal.append(Draft(saga, "refund", Phase.COMPENSATED, '{"amount":10}'))
    async with await psycopg.AsyncConnection.connect(owner_database_url, autocommit=True) as conn:
        await conn.execute(
            "UPDATE side_effect_journal SET payload = %s WHERE saga_id = %s AND seq = 2",
            ('{"refund":1000}', saga),
        )
    shown = await sagacity("saga", "journal", saga)
    assert shown.code == 1
    assert "chain BROKEN at seq 2: hash_mismatch" in shown.stdout
    assert "(verified up to seq 1)" in shown.stdout


async def test_bad_steps_files_and_arguments_are_one_line_and_exit_2(
    sagacity: Cli, tmp_path: Path
) -> None:
    """Nothing starts: each is refused with one line naming what and where, no traceback."""
    deep = "[" * 10_000 + "]" * 10_000
    step = {"tool": "reserve_inventory", "args": {"product_id": "p-1", "quantity": 1}}
    files: list[tuple[str | bytes, str]] = [
        ('{"steps": ' + deep + "}", "nested deeper than 100 levels"),
        (json.dumps({"steps": [{**step, "args": {"a": json.loads("[" * 500 + "]" * 500)}}]}), "nested deeper than 100 levels"),
        ('{"steps": [{"tool": "reserve_\\ud800", "args": {}}]}', "at steps[0].tool: '\\ud800' is a lone surrogate"),
        ('{"steps": [{"tool": "x", "args": {"note": "\\udfff"}}]}', "at steps[0].args.note: '\\udfff' is a lone surrogate"),
        ('{"steps": [{"tool": "reserve\\u0000inventory", "args": {}}]}', "steps[0].tool contains a NUL character"),
        ('{"steps": [{"tool": "", "args": {}}]}', "steps[0].tool is empty"),
        ('{"steps": [{"tool": "x", "id": "a\\u0000", "args": {}}]}', "steps[0].id contains a NUL character"),
        (b'{"steps": [{"tool": "\xff"}]}', "not UTF-8 text (byte 0xff at offset 21)"),
        ('{"steps": [{"tool": "x", "args": {"n": NaN}}]}', "NaN is not a JSON value"),
        ('{"steps": [{"tool": "x"', "not valid JSON"),
        ('{"steps": []}', "no steps to run"),
        ('{"steps": [{"tool": "x", "arg": {}}]}', "unknown field 'arg' in steps[0]"),
        (json.dumps({"steps": [step, {"tool": "create_order", "args": {"r": {"$ref": "nope.id"}}}]}), "$ref 'nope.id' names no earlier step (earlier: reserve_inventory)"),
        ('{"steps": [{"tool": "x", "args": {"big": "' + "x" * 1_100_000 + '"}}]}', "the file is over 1024 KiB"),
    ]  # fmt: skip
    runs = []
    for n, (content, _) in enumerate(files):
        path = tmp_path / f"steps-{n}.json"
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
        runs.append(sagacity("saga", "start", "--steps", str(path)))
    for (_, message), run in zip(files, await asyncio.gather(*runs), strict=True):
        assert run.code == 2, (message, run.code, run.stderr)
        assert message in run.stderr, (message, run.stderr)
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
        assert "Traceback" not in run.stderr and run.stdout == ""

    others = await asyncio.gather(
        sagacity("saga", "status", "order-\udcff"),  # argument bytes that are not UTF-8
        sagacity("saga", "start", "--order", "p-1:1", "--id", ""),
        sagacity("saga", "resolve", "s", "--seq", "3", "--happened", "--result", deep),
        sagacity("saga", "resolve", "s", "--seq", "3", "--happened", "--result", '"\\ud800"'),
        sagacity("saga", "resolve", "s", "--seq", "3", "--did-not-happen", "--result", "{}"),
        sagacity("saga", "resolve", "s", "--seq", "3", "--happened", "--by", "  "),
    )
    said = [
        "argument 'order-\\udcff' is not UTF-8 text",
        "--id is empty",
        "--result: nested deeper than 100 levels",
        "--result: '\\ud800' is a lone surrogate",
        "--result is only for a call that happened",
        "--by is empty",
    ]
    for run, message in zip(others, said, strict=True):
        assert run.code == 2 and message in run.stderr, (message, run.code, run.stderr)
        assert "Traceback" not in run.stderr


async def test_a_suspect_call_is_marked_then_resolved_from_the_cli(
    sagacity: Cli,
    make_suspects: MakeSuspects,
    temporal_client: Client,
    journal: JournalStore,
    database_url: str,
) -> None:
    (suspect,) = await make_suspects(1)
    saga, seq = suspect.saga_id, suspect.seq

    status = await sagacity("saga", "status", saga)
    assert (
        status.code == 0 and f"SUSPECT: create_order at seq {seq} has no outcome" in status.stdout
    )

    # an abort would compensate the SUSPECT call first, if it took effect: a human should look
    planned = await sagacity("saga", "abort", saga, "--dry-run", "--json")
    assert planned.code == 0, planned.stderr
    first, *_ = planned.json()["compensate"]
    assert (first["tool_name"], first["seq"]) == ("create_order", seq)
    assert "SUSPECT" in first["check"]

    # the INTENT with no outcome after it, in the journal and in verify: a warning, not a fault
    shown = await sagacity("saga", "journal", saga)
    assert shown.code == 0, shown.stderr
    lines = shown.stdout.splitlines()
    (marked,) = [line for line in lines if "[NO OUTCOME]" in line and line.startswith("│")]
    assert f"│ {seq} " in marked and "create_order" in marked and "INTENT" in marked
    assert f"[NO OUTCOME] seq {seq}: create_order has no EXECUTED or FAILED" in shown.stdout
    assert "chain verified (hash chain only" in shown.stdout and "): 3 rows" in shown.stdout
    as_json = (await sagacity("saga", "journal", saga, "--json")).json()
    assert as_json["verdict"]["ok"] is True
    assert as_json["verdict"]["dangling_intents"] == [{"seq": seq, "tool_name": "create_order"}]

    verified = await sagacity("verify", saga)
    assert verified.code == 0, verified.stdout + verified.stderr
    assert f"WARNING {saga} seq {seq}: INTENT of 'create_order' has no EXECUTED" in verified.stdout
    assert "1 sagas, 3 rows: all verified, 1 warning" in verified.stdout
    report, summary = [
        json.loads(line) for line in (await sagacity("verify", saga, "--json")).stdout.splitlines()
    ]
    assert report["ok"] is True
    assert [(w["kind"], w["seq"]) for w in report["warnings"]] == [("dangling_intent", seq)]
    assert summary["summary"]["warnings"] == 1 and summary["summary"]["ok"] is True

    wrong = await sagacity("saga", "resolve", saga, "--seq", str(seq + 1), "--happened")
    assert wrong.code == 1 and f"no SUSPECT call at seq {seq + 1}" in wrong.stderr
    unknown = await sagacity("saga", "resolve", "no-such-saga", "--seq", "3", "--happened")
    assert unknown.code == 2 and "no saga 'no-such-saga'" in unknown.stderr
    assert await phases(journal, saga) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
        ("create_order", "INTENT"),
    ]

    # dave found the order placed by hand in another system: it happened, with this result
    order = {"order_id": "ord-by-hand", "product_id": "p-1", "quantity": 2}
    resolved = await sagacity(
        "saga", "resolve", saga, "--seq", str(seq), "--happened",
        "--result", json.dumps(order), "--by", "dave",
    )  # fmt: skip
    assert resolved.code == 0, resolved.stderr
    assert (
        f"saga {saga} took the resolution: create_order at seq {seq} happened (resolved by dave); "
        f"journaled EXECUTED at seq {seq + 1}"
    ) in resolved.stdout
    again = await sagacity("saga", "resolve", saga, "--seq", str(seq), "--did-not-happen")
    assert again.code == 1 and "already has its outcome" in again.stderr, again.stderr

    rows = await journal.read(saga)
    assert rows[seq].phase is Phase.EXECUTED
    assert json.loads(rows[seq].payload) == {
        "$resolution": True,
        "resolved_by": "dave",
        "result": order,
    }
    waiting = await wait_for(suspect.handle, awaiting_approval, timeout=60)
    assert waiting.pending_approval is not None
    assert "ord-by-hand" in waiting.pending_approval.input_json  # the next step got dave's result
    await temporal_client.get_workflow_handle(saga).execute_update(
        "decide",
        Decision(journal_seq=waiting.pending_approval.journal_seq, approver="alice", approve=True),
        result_type=str,
    )
    assert (await suspect.handle.result()).status is SagaState.COMPLETED
    clean = await sagacity("saga", "journal", saga)
    assert clean.code == 0 and "[NO OUTCOME]" not in clean.stdout
    assert "WARNING" not in (await sagacity("verify", saga)).stdout
