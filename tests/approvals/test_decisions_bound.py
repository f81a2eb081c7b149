"""Decisions bound to what ran, and halts obeyed only when real (issue 27), on real Temporal and
Postgres with the decision settings ``sagacity dev`` makes (a keyring, alice's key).

The tables' owner rewrites rows and recomputes the chain, as an insider would; ``sagacity
verify`` (live) and the offline bundle verifier must name the decision that no longer matches.
Halt signals are sent the ways a person can: the plain ``temporal`` CLI, and ``sagacity halt``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity.devstack import Endpoints
from sagacity.evidence.decisions import Signer, halt_statement
from sagacity.journal import input_hash
from sagacity.settings import Settings
from sagacity.store import JournalStore, open_pool
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.temporal.models import SagaResult, SagaState
from tests.approvals import test_signed
from tests.approvals.conftest import Cli
from tests.approvals.test_signed import Keys, refusals, start_order, temporal
from tests.evidence.test_default_config_tamper import Owner
from tests.halts import lift_all
from tests.temporal.conftest import (
    awaiting_approval,
    forget_killed_worker,
    intent_written,
    wait_for,
)
from tests.temporal.test_crash import OPTIONS, WorkerProcess
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

# the signed-decision tests' keyring and worker process (the shipped worker with a keyring)
keys = test_signed.keys
signed_worker = test_signed.signed_worker

Rows = list[dict[str, Any]]


@pytest.fixture
def anchors(settings: Settings, keys: Keys) -> dict[str, str]:
    """What ``sagacity verify`` and ``export`` need: the checkpoints, the keyring, the trust
    root."""
    return {
        "SAGACITY_SIGNING_KEY": str(settings.signing_key),
        "SAGACITY_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "SAGACITY_KEYRING": str(keys.keyring),
        "SAGACITY_TRUST_FILE": str(settings.trust_file),
    }


@pytest.fixture
def operator_env(settings: Settings, keys: Keys, owner_database_url: str) -> dict[str, str]:
    """An operator's environment for ``sagacity halt``: the tables' owner, alice's key."""
    return {"SAGACITY_OWNER_DATABASE_URL": owner_database_url, **keys.env()}


@pytest.fixture(autouse=True)
async def _lift_halts(owner_database_url: str) -> AsyncIterator[None]:
    yield
    await lift_all(owner_database_url)


class Verifier:
    """``sagacity verify`` of one saga, live and from a fresh export, as an auditor runs them."""

    def __init__(self, cli: Cli, env: dict[str, str], public_key: str, folder: Path) -> None:
        self.cli, self.env, self.public_key, self.folder = cli, env, public_key, folder
        self.exports = 0

    async def both(self, saga_id: str) -> tuple[int, str, int, str]:
        """(exit code, output) of the live verify, then of the bundle verify."""
        live = await self.cli("verify", saga_id, extra_env=self.env)
        self.exports += 1
        bundle = self.folder / f"bundle-{self.exports}"
        exported = await self.cli("export", saga_id, "--out", str(bundle), extra_env=self.env)
        assert exported.code == 0, exported.stderr
        offline = await self.cli(
            "verify", "--bundle", str(bundle), "--public-key", self.public_key, extra_env=self.env
        )
        return live.code, live.stdout + live.stderr, offline.code, offline.stdout + offline.stderr


@pytest.fixture
def verifier(cli: Cli, anchors: dict[str, str], settings: Settings, tmp_path: Path) -> Verifier:
    return Verifier(cli, anchors, str(settings.checkpoint_public_key), tmp_path)


def edit_inputs(first_seq: int, old: str, new: str) -> Callable[[Rows], Rows]:
    """Replace ``old`` by ``new`` in the input of every row from ``first_seq`` on."""

    def change(rows: Rows) -> Rows:
        return [
            {**r, "input": r["input"].replace(old, new)} if r["seq"] >= first_seq else r
            for r in rows
        ]

    return change


async def test_an_approval_is_bound_to_its_request_and_to_the_call_that_ran(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    owner_database_url: str,
    verifier: Verifier,
) -> None:
    handle, status = await start_order(temporal_client, task_queue)
    pending = status.pending_approval
    assert pending is not None
    request = pending.journal_seq
    approved = await cli(
        "approvals", "approve", handle.id, str(request), "--as", "alice", extra_env=keys.env()
    )
    assert approved.code == 0, approved.stderr
    assert (await handle.result()).status is SagaState.COMPLETED
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline
    assert "WARNING" not in said

    owner = Owner(owner_database_url)
    honest = await owner.rows(handle.id)
    order_id = json.loads(honest[request - 1]["input"])["order_id"]
    forged_input = honest[request - 1]["input"].replace(order_id, "o-forged")
    signed_over, forged_hash = pending.input_hash, input_hash(forged_input)
    assert signed_over == input_hash(honest[request - 1]["input"])

    # the order id changed in the APPROVED row and every row after it, the chain recomputed
    await owner.rewrite(handle.id, edit_inputs(request + 1, order_id, "o-forged"))
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    for output in (said, said_offline):
        assert (
            f"decision seq {request + 1} disagrees: it repeats input sha256 {forged_hash} but "
            f"the request at seq {request} holds {signed_over}"
        ) in output, output
        assert f"INTENT seq {request + 2} disagrees: it runs input sha256 {forged_hash}" in output

    # the request changed too: the row repeats it, but the signature is over the old input
    await owner.replace(handle.id, honest)
    await owner.rewrite(handle.id, edit_inputs(request, order_id, "o-forged"))
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    for output in (said, said_offline):
        assert (
            f"decision seq {request + 1} disagrees: signed over input sha256 {signed_over} but "
            f"the request at seq {request} holds {forged_hash}"
        ) in output, output

    # the approval taken away altogether: the call that needed it ran with none
    await owner.replace(handle.id, honest)
    await owner.rewrite(handle.id, lambda rows: [r for r in rows if r["seq"] != request + 1])
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    for output in (said, said_offline):
        assert (
            f"INTENT seq {request + 1} of 'send_confirmation' has no APPROVED before it" in output
        )


async def test_an_abort_carries_its_signature_and_an_edited_sender_is_named(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    endpoints: Endpoints,
    owner_database_url: str,
    journal: JournalStore,
    verifier: Verifier,
) -> None:
    handle, waiting = await start_order(temporal_client, task_queue)
    assert waiting.pending_approval is not None
    at = waiting.pending_approval.journal_seq + 1
    sent = await cli(
        "saga", "abort", handle.id, "--reason", "customer called", extra_env=keys.env()
    )
    assert sent.code == 0, sent.stderr
    assert (await handle.result()).status is SagaState.ABORTED
    row = json.loads((await journal.read(handle.id))[at - 1].payload)
    assert (row["abort"], row["by"], row["decision"], row["signer"]) == (
        True,
        "alice",
        "abort",
        "alice",
    )
    assert row["reason"] == "customer called" and row["signature"] and row["signed_at"]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline

    # the tables' owner names someone else as the one who aborted, the chain recomputed
    def to_mallory(rows: Rows) -> Rows:
        return [
            {**r, "payload": r["payload"].replace('"by":"alice"', '"by":"mallory"')}
            if r["seq"] == at
            else r
            for r in rows
        ]

    await Owner(owner_database_url).rewrite(handle.id, to_mallory)
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    for output in (said, said_offline):
        assert f"seq {at}" in output and "REJECTED abort by 'mallory'" in output, output
        assert "(alice) may not sign for 'mallory'" in output

    # an unsigned abort is taken, journaled unverified, and verify warns of it without failing
    handle, waiting = await start_order(temporal_client, task_queue)
    assert waiting.pending_approval is not None
    signal = await temporal(
        endpoints, "workflow", "signal", "--workflow-id", handle.id, "--name", "abort",
        "--input", json.dumps({"reason": "customer called", "by": "ops-oncall"}),
    )  # fmt: skip
    assert signal.code == 0, signal.stderr
    assert (await handle.result()).status is SagaState.ABORTED
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline
    for output in (said, said_offline):
        assert "WARNING" in output and "unsigned: nothing proves it came from" in output, output
        assert "'unverified:ops-oncall'" in output


async def halt_signal(endpoints: Endpoints, saga_id: str, payload: dict[str, Any]) -> None:
    sent = await temporal(
        endpoints, "workflow", "signal", "--workflow-id", saga_id, "--name", "halt",
        "--input", json.dumps(payload),
    )  # fmt: skip
    assert sent.code == 0, sent.stderr


async def mid_call(
    client: Client, task_queue: str, shop: Shop, journal: JournalStore, delay_s: float = 6
) -> WorkflowHandle[Any, SagaResult]:
    """An Order saga whose create_order call is running (held up ``delay_s``)."""
    await shop.arm_fault("create_order", "", times=1, delay_s=delay_s)
    handle = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=2, options=OPTIONS),
        id=f"halted-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await intent_written(journal, handle.id, "create_order")
    return handle


async def test_an_unproven_halt_signal_is_refused_and_changes_nothing(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    shop: Shop,
    journal: JournalStore,
) -> None:
    handle = await mid_call(temporal_client, task_queue, shop, journal)
    # a halt signal with policy compensate, naming no halt the store holds, and unsigned
    await halt_signal(
        endpoints,
        handle.id,
        {"halt_id": 987654, "policy": "compensate", "operator": "ops", "reason": "drill"},
    )
    refused = await refusals(handle, 1)
    assert refused[0].startswith("ops: halt 987654 refused: the halt store holds no such halt")
    # the saga goes on as if nothing was sent: on to its approval gate, not aborted
    status = await wait_for(handle, awaiting_approval)
    assert not status.halted and status.pending_approval is not None
    await handle.signal("abort", {"reason": "test over"})
    assert (await handle.result()).status is SagaState.ABORTED


async def test_a_halt_stops_what_is_still_to_run_and_names_whom_the_store_proves(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    endpoints: Endpoints,
    shop: Shop,
    journal: JournalStore,
    cli: Cli,
    operator_env: dict[str, str],
    keys: Keys,
) -> None:
    # a real halt through `sagacity halt`, signed by alice: the running saga aborts
    running = await mid_call(temporal_client, task_queue, shop, journal)
    halted = await cli(
        "halt", "--saga", running.id, "--policy", "compensate", "--reason", "bad prices",
        "--settle", "0", extra_env=operator_env,
    )  # fmt: skip
    assert halted.code == 0, halted.stderr
    result = await running.result()
    assert result.status is SagaState.ABORTED and result.error is not None
    assert "aborted by alice: halted:" in result.error.message
    await lift_all(operator_env["SAGACITY_OWNER_DATABASE_URL"])

    # a halt the store holds, told by a bare signal whose sender claims to be mallory: obeyed,
    # in the name of the operator whose signature the stored halt carries
    running = await mid_call(temporal_client, task_queue, shop, journal)
    scope = HaltScope(sagas=(running.id,))
    statement = halt_statement(
        kind="halt", policy="compensate", scope=scope.as_json(), operator="alice", reason="audit"
    )
    pool = await open_pool(operator_env["SAGACITY_OWNER_DATABASE_URL"])
    try:
        halt = await HaltStore(pool).halt(
            kind="halt",
            scope=scope,
            policy="compensate",
            reason="audit",
            operator="alice",
            signature=Signer.open(keys.alice).sign(statement).model_dump(),
        )
    finally:
        await pool.close()
    await halt_signal(
        endpoints, running.id, {"halt_id": halt.id, "policy": "compensate", "operator": "mallory"}
    )
    result = await running.result()
    assert result.status is SagaState.ABORTED and result.error is not None
    assert f"aborted by alice: halted: halt {halt.id} by alice" in result.error.message
    await lift_all(operator_env["SAGACITY_OWNER_DATABASE_URL"])

    # a saga compensating after a failure ends COMPENSATED, whatever halt comes meanwhile
    await shop.arm_fault("create_order", "out of paper", times=1)
    await shop.arm_fault("release_inventory", "", times=1, delay_s=10)
    failing = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=2, options=OPTIONS),
        id=f"failing-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await wait_for(failing, lambda s: s.state is SagaState.COMPENSATING)
    halted = await cli(
        "halt", "--saga", failing.id, "--policy", "compensate", "--reason", "bad prices",
        "--settle", "0", extra_env=operator_env,
    )  # fmt: skip
    assert halted.code == 0, halted.stderr
    await halt_signal(endpoints, failing.id, {"halt_id": 0, "policy": "compensate"})
    result = await failing.result()
    assert result.status is SagaState.COMPENSATED, result
    assert result.error is not None and "out of paper" in result.error.message
    assert "reserve_inventory" in [e.tool_name for e in result.compensated]


async def test_a_resolution_carries_its_signature_and_an_edited_resolver_is_named(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    shop: Shop,
    journal: JournalStore,
    owner_database_url: str,
    verifier: Verifier,
) -> None:
    handle = await mid_call(temporal_client, task_queue, shop, journal, delay_s=60)
    signed_worker.kill()
    await forget_killed_worker(temporal_client, handle.id)
    await signed_worker.start()
    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None
    seq = status.suspect.call_seq
    resolved = await cli(
        "saga", "resolve", handle.id, "--seq", str(seq), "--happened",
        "--result", '{"order_id": "o-by-hand"}', extra_env=keys.env(),
    )  # fmt: skip
    assert resolved.code == 0, resolved.stderr
    waiting = await wait_for(handle, awaiting_approval)
    assert waiting.pending_approval is not None
    approved = await cli(
        "approvals", "approve", handle.id, str(waiting.pending_approval.journal_seq),
        "--as", "alice", extra_env=keys.env(),
    )  # fmt: skip
    assert approved.code == 0, approved.stderr
    assert (await handle.result()).status is SagaState.COMPLETED
    rows = await journal.read(handle.id)
    row = json.loads(rows[seq].payload)  # the row after the INTENT at seq
    assert (row["decision"], row["by"], row["resolved_by"], row["signer"]) == (
        "happened",
        "alice",
        "alice",
        "alice",
    )
    assert row["input_hash"] == rows[seq - 1].hash and row["signature"]
    assert row["result"] == {"order_id": "o-by-hand"}
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline

    # the tables' owner makes mallory the resolver, the chain recomputed
    def to_mallory(rows: Rows) -> Rows:
        return [
            {**r, "payload": r["payload"].replace('"alice"', '"mallory"')}
            if r["seq"] == seq + 1
            else r
            for r in rows
        ]

    await Owner(owner_database_url).rewrite(handle.id, to_mallory)
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    for output in (said, said_offline):
        assert f"seq {seq + 1}" in output and "EXECUTED happened by 'mallory'" in output, output
