"""``sagacity saga status``: one shape for a running and an ended saga, the result shown, and a
COMPENSATABLE effect said to be corrected (not restored) wherever a person reads about it.

Against real Temporal and Postgres: the test worker serves the Order tools with ``send_quote``
(COMPENSATABLE, its undo a correction email), and the ``sagacity`` command runs as a user's. A
saga whose workflow was terminated or timed out prints the same shape, with what it left live.
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
from temporalio.client import Client, WorkflowFailureError
from temporalio.worker import Worker

from sagacity.agents.workflow import compensation_summary
from sagacity.approvals import ApprovalService
from sagacity.approvals.console import COOKIE, WebConsole
from sagacity.approvals.http import create_app
from sagacity.cli.saga.shape import schema
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import Decision, SagaResult
from tests.approvals.conftest import Cli, StartOrder
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

SCHEMA_FILE = Path(__file__).parents[2] / "docs" / "status.schema.json"


def valid(document: dict[str, Any]) -> dict[str, Any]:
    """``document``, once it validates against the checked-in schema."""
    jsonschema.validate(document, json.loads(SCHEMA_FILE.read_text(encoding="utf-8")))
    return document


def test_the_documented_schema_is_the_one_the_model_generates() -> None:
    checked_in = json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))
    assert checked_in == schema(), "regenerate docs/status.schema.json (see docs/status.md)"


async def test_a_running_and_an_ended_saga_name_their_state_alike(
    cli: Cli, worker: Worker, temporal_client: Client
) -> None:
    queue = {"SAGACITY_TASK_QUEUE": worker.task_queue}
    started = await cli("saga", "start", "--order", "p-1:2", "--wait", extra_env=queue)
    assert started.code == 0, started.stderr
    saga = started.stdout.strip()

    waiting = await cli("saga", "status", saga, "--json")
    assert waiting.code == 0, waiting.stderr
    running = valid(waiting.json())
    assert (running["state"], running["ended"]) == ("awaiting_approval", False)
    assert running["pending_approval"]["journal_seq"] == 5 and "status" not in running

    await temporal_client.get_workflow_handle(saga).execute_update(
        "decide", Decision(journal_seq=5, approver="alice", approve=True), result_type=str
    )
    done = await cli("saga", "status", saga, "--wait", "--json")
    assert done.code == 0, done.stderr
    ended = valid(done.json())
    assert (ended["state"], ended["ended"]) == ("completed", True) and "status" not in ended
    order = ended["result"]
    assert order["order_id"].startswith("ord-") and order["message_id"]

    text = await cli("saga", "status", saga)
    assert text.code == 0, text.stderr
    assert f"saga {saga}: completed (journal head seq 8)" in text.stdout
    (result,) = [line for line in text.stdout.splitlines() if line.startswith("  result: ")]
    assert json.loads(result.removeprefix("  result: ")) == order


async def test_a_corrected_quote_is_said_corrected_and_a_released_reservation_restored(
    cli: Cli,
    worker: Worker,
    temporal_client: Client,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    tmp_path: Path,
) -> None:
    steps = tmp_path / "steps.json"
    steps.write_text(
        json.dumps(
            [
                {"tool": "reserve_inventory", "args": {"product_id": "p-1", "quantity": 2}},
                {"tool": "send_quote", "args": {"product_id": "p-1", "quantity": 2,
                                                 "price_cents": 1998}},
                {"tool": "reserve_inventory", "id": "too_many",
                 "args": {"product_id": "p-2", "quantity": 999}},
            ]
        )
    )  # fmt: skip
    saga = f"quote-{uuid.uuid4().hex[:8]}"
    queue = {"SAGACITY_TASK_QUEUE": worker.task_queue}
    ran = await cli("saga", "start", "--steps", str(steps), "--id", saga, "--wait", "--json",
                    extra_env=queue)  # fmt: skip
    assert ran.code == 1, ran.stderr
    ended = valid(ran.json())
    assert (ended["state"], ended["ended"]) == ("compensated", True)
    quote, reservation = ended["compensated"]
    assert (quote["tool_name"], quote["undone_as"]) == ("send_quote", "corrected")
    assert (reservation["tool_name"], reservation["undone_as"]) == ("reserve_inventory", "restored")
    assert reservation["correction"] is None
    correction = quote["correction"]
    assert set(correction) == {"correction_message_id", "quote_id"}

    # the correction email is in the outbox after the quote, which stays
    async with shop.pool.connection() as conn:
        mails = await (
            await conn.execute(
                "SELECT id, kind FROM outbox WHERE saga_id = %s ORDER BY id", (saga,)
            )
        ).fetchall()
    assert [kind for _, kind in mails] == ["quote", "correction"]
    assert mails[1][0] == correction["correction_message_id"]

    # the journal's COMPENSATED row records the correction, hashed with the row
    rows = await journal.read(saga)
    (corrected_row,) = [
        r for r in rows if r.phase.value == "COMPENSATED" and r.tool_name == "send_quote"
    ]
    assert json.loads(corrected_row.payload) == {"corrected": correction}
    (restored_row,) = [
        r for r in rows if r.phase.value == "COMPENSATED" and r.tool_name != "send_quote"
    ]
    assert restored_row.payload == ""
    verified = await cli("verify", saga)
    assert verified.code == 0, verified.stdout + verified.stderr

    said = json.dumps(correction)
    text = await cli("saga", "status", saga)
    assert text.code == 1
    assert (
        f"  corrected, not restored: send_quote (seq 3); the correction returned {said}"
        in text.stdout.splitlines()
    )
    assert "  undone: reserve_inventory" in text.stdout.splitlines()

    certified = await cli("certify", "--saga", saga)
    assert certified.code == 0, certified.stdout + certified.stderr
    shown = json.dumps(correction, sort_keys=True)
    assert (
        f"saga {saga}: send_quote (call seq 3) corrected, not restored: the correction "
        f"returned {shown}" in certified.stdout
    )
    as_json = json.loads((await cli("certify", "--saga", saga, "--json")).stdout)
    assert as_json["certified"] is True
    assert as_json["corrected"] == [{"seq": 3, "tool": "send_quote", "correction": correction}]

    reconciled = await cli("reconcile", saga, "--app", "workflows.order.quote_app", "--json")
    assert reconciled.code == 0, reconciled.stderr
    calls = {c["seq"]: c for c in json.loads(reconciled.stdout)["calls"]}
    assert calls[3]["verdict"] == "corrected"
    assert calls[3]["journal"] == (
        f"EXECUTED, COMPENSATED (corrected, not restored: the correction returned {shown})"
    )
    assert calls[3]["exists"] is True  # the quote stays; a correction follows it
    assert (calls[1]["tool"], calls[1]["verdict"]) == ("reserve_inventory", "ok")
    assert calls[1]["journal"] == "EXECUTED, COMPENSATED"

    # the agent's summary, from the saga's own result
    result = await temporal_client.get_workflow_handle(saga, result_type=SagaResult).result()
    summary = compensation_summary(result)
    assert summary is not None
    assert "Undone, newest first: reserve_inventory (call 1)." in summary
    assert (
        "Corrected, not undone (the original stays visible, a correction followed it): "
        f"send_quote (call 3), correction result {json.dumps(correction, separators=(',', ':'), sort_keys=True)}."
        in summary
    )

    # the console's saga page
    service = ApprovalService(temporal_client, approvals, journal=journal)
    app = create_app(service, {"tok-alice": "alice"}, web=WebConsole(service, journal))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://approvals") as web:
        web.cookies.set(COOKIE, "tok-alice", path="/console")
        page = await web.get(f"/console/sagas/{saga}")
    assert page.status_code == 200, page.text
    assert 'data-testid="corrected"' in page.text and "Corrected, not restored" in page.text
    assert 'data-testid="node-compensation" data-status="corrected"' in page.text
    assert 'data-testid="node-compensation" data-status="compensated"' in page.text
    assert ">correct send_quote<" in page.text and ">undo reserve_inventory<" in page.text


async def test_a_rejected_order_saga_ends_with_its_effects_restored(
    cli: Cli, worker: Worker, temporal_client: Client
) -> None:
    queue = {"SAGACITY_TASK_QUEUE": worker.task_queue}
    started = await cli("saga", "start", "--order", "p-1:1", extra_env=queue)
    saga = started.stdout.strip()
    handle = temporal_client.get_workflow_handle(saga, result_type=SagaResult)
    await wait_for(handle, awaiting_approval)
    await handle.execute_update(
        "decide", Decision(journal_seq=5, approver="alice", approve=False, reason="no"),
        result_type=str,
    )  # fmt: skip
    done = await cli("saga", "status", saga, "--wait", "--json")
    assert done.code == 1, done.stderr
    ended = valid(done.json())
    assert (ended["state"], ended["ended"]) == ("compensated", True)
    assert [(e["tool_name"], e["undone_as"]) for e in ended["compensated"]] == [
        ("create_order", "restored"),
        ("reserve_inventory", "restored"),
    ]
    assert ended["error"]["type"] == "ApprovalRejected"


async def test_a_terminated_saga_prints_its_shape_with_what_it_left_live(
    cli: Cli, start_order: StartOrder
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test: an operator's terminate")

    shown = await cli("saga", "status", waiting.saga_id, "--json")
    assert shown.code == 1, shown.stderr
    ended = valid(shown.json())
    assert (ended["state"], ended["ended"]) == ("terminated", True)
    assert ended["error"]["type"] == "TerminatedError"
    assert ended["head"]["seq"] == waiting.seq  # the open approval request is its newest row
    assert [(e["tool_name"], e["call_seq"]) for e in ended["live_effects"]] == [
        ("reserve_inventory", 1),
        ("create_order", 3),
    ]
    assert "create_order (call seq 3) took effect" in ended["live_effects"][1]["detail"]
    assert f"`sagacity saga rollback {waiting.saga_id}`" in ended["needs_attention"]
    assert "create_order (call seq 3) took effect" in shown.stderr  # stdout is the JSON alone

    text = await cli("saga", "status", waiting.saga_id)
    assert (text.code, text.stdout) == (1, "")
    assert "did not complete: TerminatedError" in text.stderr


async def test_a_timed_out_saga_says_it_timed_out(
    cli: Cli, worker: Worker, temporal_client: Client
) -> None:
    saga = f"order-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=1),
        id=saga,
        task_queue=worker.task_queue,
        result_type=SagaResult,
        execution_timeout=timedelta(seconds=5),
    )
    await wait_for(handle, awaiting_approval)
    with pytest.raises(WorkflowFailureError):  # the approval it waits for never comes
        await handle.result()

    shown = await cli("saga", "status", saga, "--json")
    assert shown.code == 1, shown.stderr
    ended = valid(shown.json())
    assert (ended["state"], ended["ended"]) == ("timed_out", True)
    assert ended["error"]["type"] == "TimeoutError"
    assert [(e["tool_name"], e["call_seq"]) for e in ended["live_effects"]] == [
        ("reserve_inventory", 1),
        ("create_order", 3),
    ]
