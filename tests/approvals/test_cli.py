"""``sagacity approvals`` and the plain ``temporal`` CLI, as an operator uses them."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import sys
from pathlib import Path

import httpx
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.devstack import Endpoints, find_temporal_executable
from sagacity.journal import input_hash
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState, SagaStatus
from tests.approvals.conftest import GATE_SEQ, START, Cli, StartOrder, codec_server
from tests.temporal.conftest import phases
from workflows.order.shop import Shop


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def test_list_shows_the_waiting_call_and_a_temporal_signal_approves_it(
    start_order: StartOrder,
    cli: Cli,
    endpoints: Endpoints,
    temporal_client: Client,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
) -> None:
    waiting = await start_order()
    assert waiting.seq == GATE_SEQ

    listed = await cli("approvals", "list", "--json", "--saga", waiting.saga_id)
    assert listed.code == 0, listed.stderr
    (item,) = listed.json()["requests"]
    assert item["tool_name"] == "send_confirmation"
    order_id = json.loads(item["input"])["order_id"]
    assert item["input"] == json.dumps({"order_id": order_id}, separators=(",", ":"))
    assert item["input_hash"] == input_hash(item["input"])
    assert item["waiting"] is True and item["intact"] is True
    assert item["saga_state"] == "awaiting_approval"

    table = await cli("approvals", "list", extra_env={"COLUMNS": "80"})  # a pipe's width
    assert table.code == 0, table.stderr
    line = next(row for row in table.stdout.splitlines() if waiting.saga_id in row)
    assert "send_confirmation" in line and order_id in line and item["input_hash"][:12] in line

    async def temporal(*args: str) -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            str(find_temporal_executable()),
            "workflow", *args,
            "--address", endpoints.temporal_address,
            "--namespace", endpoints.temporal_namespace,
            "--workflow-id", waiting.saga_id,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        out, _ = await proc.communicate()
        assert proc.returncode is not None
        return proc.returncode, out.decode()

    # the decide update answers at once; a refused one changes nothing. Its answer is
    # encrypted: the CLI reads it through the approvals API's codec server
    wrong = {"journal_seq": 99, "approver": "alice", "approve": True}
    async with codec_server(temporal_client, approvals) as url:
        code, out = await temporal(
            "update", "execute", "--name", "decide", "--input", json.dumps(wrong),
            "--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer tok-alice",
        )  # fmt: skip
    assert code != 0 and "no request awaits a decision at seq 99" in out

    approve = {"journal_seq": waiting.seq, "approver": "alice"}
    code, out = await temporal("signal", "--name", "approve", "--input", json.dumps(approve))
    assert code == 0, out

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
    # the saga's own end, not Temporal's ("completed" for every saga that returned)
    late = await cli("approvals", "approve", second.saga_id, str(second.seq), "--as", "alice")
    assert late.code == 1 and "has ended (compensated)" in late.stderr, late.stderr
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


async def test_bad_decisions_are_one_line_exit_2_and_change_nothing(
    start_order: StartOrder, cli: Cli, journal: JournalStore, service: ApprovalService
) -> None:
    waiting = await start_order()
    sid, seq = waiting.saga_id, str(waiting.seq)
    runs = await asyncio.gather(
        cli("approvals", "reject", sid, seq, "--as", "alice", "--reason", "bad\x01byte"),
        cli("approvals", "approve", sid, seq, "--as", "alice", "--input-hash", "not-a-hash"),
        cli("approvals", "approve", sid, seq, "--as", " "),
    )
    for run in runs:
        assert run.code == 2, (run.code, run.stderr)
        assert run.stderr.startswith("error: the decision: ") and "Traceback" not in run.stderr
        assert len(run.stderr.strip().splitlines()) == 1, run.stderr
    assert len(await journal.read(sid)) == GATE_SEQ
    status = await waiting.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL and status.refused_decisions == []
    # end it: a saga left waiting without a worker would slow every later listing
    await service.reject(sid, waiting.seq, approver="alice", reason="test done")
    assert (await waiting.handle.result()).status is SagaState.COMPENSATED


async def test_missing_configuration_exits_2_naming_it(cli: Cli) -> None:
    result = await cli("approvals", "list", extra_env={"TEMPORAL_ADDRESS": ""})
    assert result.code == 2 and "TEMPORAL_ADDRESS" in result.stderr


async def test_serve_runs_the_http_api_until_sigterm(
    endpoints: Endpoints, database_url: str, temporal_client: Client
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "SAGACITY_DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": endpoints.temporal_address,
        "TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
        "SAGACITY_APPROVAL_TOKENS": "tok-ops=ops",
    }
    server = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("sagacity")),
        "approvals", "serve", "--port", str(port),
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    try:
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}") as http:
            deadline = asyncio.get_running_loop().time() + 60  # a loaded machine starts slowly
            while True:
                try:
                    anonymous = await http.get("/approvals")
                    break
                except httpx.TransportError:
                    assert server.returncode is None, "the server exited before listening"
                    assert asyncio.get_running_loop().time() < deadline, "never listened"
                    await asyncio.sleep(0.1)
            assert anonymous.status_code == 401
            listed = await http.get("/approvals", headers={"Authorization": "Bearer tok-ops"})
            assert listed.status_code == 200 and isinstance(listed.json()["requests"], list)
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(server.communicate(), timeout=20)
    assert server.returncode == 0, out.decode()


async def test_serve_refuses_to_start_without_tokens(cli: Cli) -> None:
    result = await cli("approvals", "serve", extra_env={"SAGACITY_APPROVAL_TOKENS": ""})
    assert result.code == 2 and "SAGACITY_APPROVAL_TOKENS" in result.stderr
