"""``sagacity approvals`` and the plain ``temporal`` CLI, as an operator uses them."""

from __future__ import annotations

import asyncio
import json

from sagacity.devstack import Endpoints, find_temporal_executable
from sagacity.journal import input_hash
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import GATE_SEQ, START, Cli, StartOrder
from tests.temporal.conftest import phases
from workflows.order.shop import Shop


async def test_list_shows_the_waiting_call_and_a_temporal_signal_approves_it(
    start_order: StartOrder,
    cli: Cli,
    endpoints: Endpoints,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
) -> None:
    waiting = await start_order()
    assert waiting.seq == GATE_SEQ

    listed = await cli("approvals", "list", "--json", "--saga", waiting.saga_id)
    assert listed.code == 0, listed.stderr
    (item,) = listed.json()
    assert item["tool_name"] == "send_confirmation"
    order_id = json.loads(item["input"])["order_id"]
    assert item["input"] == json.dumps({"order_id": order_id}, separators=(",", ":"))
    assert item["input_hash"] == input_hash(item["input"])
    assert item["waiting"] is True and item["intact"] is True
    assert item["saga_state"] == "awaiting_approval"

    table = await cli("approvals", "list")
    assert table.code == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if waiting.saga_id in row)
    assert "send_confirmation" in line and order_id in line and item["input_hash"][:12] in line

    signal = await asyncio.create_subprocess_exec(
        str(find_temporal_executable()),
        "workflow", "signal",
        "--address", endpoints.temporal_address,
        "--namespace", endpoints.temporal_namespace,
        "--workflow-id", waiting.saga_id,
        "--name", "approve",
        "--input", json.dumps({"journal_seq": waiting.seq, "approver": "alice"}),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    out, _ = await signal.communicate()
    assert signal.returncode == 0, out.decode()

    result = await waiting.handle.result()
    assert result.status is SagaState.COMPLETED
    assert (await phases(journal, waiting.saga_id))[4:] == [
        ("send_confirmation", "AWAITING_APPROVAL"),
        ("approval-gate", "APPROVED"),
        ("send_confirmation", "INTENT"),
        ("send_confirmation", "EXECUTED"),
    ]
    rows = await journal.read(waiting.saga_id)
    assert rows[5].payload == "approver=alice"
    assert (await journal.verify(waiting.saga_id)).ok
    assert await approvals.get(waiting.saga_id, waiting.seq) is None
    assert (await shop.snapshot()).outbox == 1
    after = await cli("approvals", "list", "--json", "--saga", waiting.saga_id)
    assert after.json() == []


async def test_show_approve_and_reject_commands(
    start_order: StartOrder, cli: Cli, journal: JournalStore, shop: Shop
) -> None:
    first, second = await asyncio.gather(start_order(), start_order())

    shown = await cli("approvals", "show", first.saga_id, str(first.seq))
    assert shown.code == 0, shown.stderr
    assert "send_confirmation" in shown.stdout and "waiting" in shown.stdout

    approved = await cli("approvals", "approve", first.saga_id, str(first.seq), "--as", "alice")
    assert approved.code == 0, approved.stderr
    assert approved.stdout.startswith("approved send_confirmation")
    assert (await first.handle.result()).status is SagaState.COMPLETED

    rejected = await cli(
        "approvals", "reject", second.saga_id, str(second.seq),
        "--as", "bob", "--reason", "wrong address", "--json",
    )  # fmt: skip
    assert rejected.code == 0, rejected.stderr
    assert rejected.json()["decision"] == "rejected"
    assert (await second.handle.result()).status is SagaState.COMPENSATED
    rejection = (await journal.read(second.saga_id))[5]
    assert json.loads(rejection.payload) == {"by": "bob", "reason": "wrong address"}

    again = await cli("approvals", "approve", first.saga_id, str(first.seq), "--as", "alice")
    assert again.code == 1 and "has ended (completed)" in again.stderr
    snap = await shop.snapshot()
    assert snap.outbox == 1 and snap.available == {**START, "p-1": START["p-1"] - 2}


async def test_allow_list_from_the_environment_refuses_other_approvers(
    start_order: StartOrder, cli: Cli, journal: JournalStore
) -> None:
    waiting = await start_order()
    policy = {"SAGACITY_APPROVERS": "send_confirmation=carol"}
    refused = await cli(
        "approvals", "approve", waiting.saga_id, str(waiting.seq), "--as", "mallory",
        extra_env=policy,
    )  # fmt: skip
    assert refused.code == 1 and "may not decide" in refused.stderr
    assert len(await journal.read(waiting.saga_id)) == GATE_SEQ
    allowed = await cli(
        "approvals", "approve", waiting.saga_id, str(waiting.seq), "--as", "carol",
        extra_env=policy,
    )  # fmt: skip
    assert allowed.code == 0, allowed.stderr
    assert (await waiting.handle.result()).status is SagaState.COMPLETED


async def test_missing_configuration_exits_2_naming_it(cli: Cli) -> None:
    result = await cli("approvals", "list", extra_env={"TEMPORAL_ADDRESS": ""})
    assert result.code == 2 and "TEMPORAL_ADDRESS" in result.stderr
