"""``sagacity reconcile``: the journal against the Order shop's tables, on real Temporal and Postgres.

Effects are changed behind the journal's back with SQL on the shop's tables; SUSPECT calls come
from a worker process killed mid-call (``make_suspects``). The command runs as users run it, the
installed executable loading ``workflows.order.app``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.journal import Draft, Phase
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import Approve, Reject, SagaResult, SagaState, SagaStatus
from tests.approvals import conftest as approval_fixtures
from tests.approvals.conftest import MakeSuspects, StartOrder
from tests.conftest import scratch_database
from tests.ops.conftest import Cli, CliResult, StartWorker
from tests.temporal.conftest import (
    awaiting_approval,
    forget_killed_worker,
    intent_written,
    phases,
    wait_for,
)
from tests.temporal.test_crash import OPTIONS
from workflows.order.shop import Shop
from workflows.order.tools import effect_id
from workflows.order.workflows import OrderRequest

start_order = approval_fixtures.start_order


def calls(result: CliResult) -> dict[tuple[str, int], dict[str, Any]]:
    """The probed calls of ``--json`` output, by (saga, seq)."""
    return {
        (line["saga_id"], call["seq"]): call
        for line in (json.loads(text) for text in result.stdout.splitlines())
        for call in line["calls"]
    }


async def test_effects_changed_behind_the_journals_back_are_drift_naming_saga_seq_and_tool(
    start_order: StartOrder, cli: Cli, shop: Shop
) -> None:
    # one saga completes (all three effects live), one is rejected at its gate (both undone)
    done = await start_order()
    await done.handle.signal("approve", Approve(journal_seq=done.seq, approver="alice"))
    assert (await done.handle.result()).status is SagaState.COMPLETED
    undone = await start_order()
    await undone.handle.signal("reject", Reject(journal_seq=undone.seq, approver="alice"))
    assert (await undone.handle.result()).status is SagaState.COMPENSATED

    for saga in (done, undone):
        clean = await cli("reconcile", saga.saga_id)
        assert clean.code == 0, clean.stdout + clean.stderr
        assert "1 sagas" in clean.stdout and "sagas need a person" in clean.stdout
        assert "0 sagas need a person" in clean.stdout
    clean = await cli("reconcile", done.saga_id, "--json")
    assert [(c["tool"], c["journal"], c["verdict"]) for c in calls(clean).values()] == [
        ("reserve_inventory", "EXECUTED", "ok"),
        ("create_order", "EXECUTED", "ok"),
        ("send_confirmation", "EXECUTED", "ok"),
    ]

    # the completed saga's order deleted; the rolled-back saga's order put back, as placed
    async with shop.pool.connection() as conn:
        await conn.execute("DELETE FROM orders WHERE id = %s", (effect_id("ord", done.saga_id, 3),))
        cur = await conn.execute(
            "DELETE FROM orders WHERE id = %s RETURNING id, product_id, quantity, reservation_id",
            (effect_id("ord", undone.saga_id, 3),),
        )
        row = await cur.fetchone()
        assert row is not None
        await conn.execute(
            "INSERT INTO orders (id, product_id, quantity, reservation_id, status, saga_id) "
            "VALUES (%s, %s, %s, %s, 'placed', %s)",
            (*row, undone.saga_id),
        )

    gone = await cli("reconcile", done.saga_id)
    assert gone.code == 1, gone.stdout + gone.stderr
    assert done.saga_id in gone.stdout and "create_order" in gone.stdout
    assert "the effect is gone" in gone.stdout and "1 drift" in gone.stdout
    back = await cli("reconcile", undone.saga_id, "--json")
    assert back.code == 1, back.stderr
    found = calls(back)
    assert found[(undone.saga_id, 3)] == {
        "saga_id": undone.saga_id,
        "seq": 3,
        "tool": "create_order",
        "journal": "EXECUTED, COMPENSATED",
        "expected": False,
        "exists": True,
        "verdict": "drift",
        "detail": "EXECUTED, COMPENSATED, but the effect still exists",
    }
    assert found[(undone.saga_id, 1)]["verdict"] == "ok"  # the reservation is still released
    assert "1 sagas need a person" in back.stderr


async def test_suspect_calls_are_resolved_from_the_probe_and_the_saga_goes_on(
    make_suspects: MakeSuspects, cli: Cli, shop: Shop, journal: JournalStore
) -> None:
    happened, not_happened = await make_suspects(2)
    seq = happened.seq
    assert seq == not_happened.seq == 3
    # the lost attempt placed one order before its worker died: the journal cannot know
    order_id = effect_id("ord", happened.saga_id, seq)
    async with shop.pool.connection() as conn:
        await conn.execute(
            "INSERT INTO orders (id, product_id, quantity, reservation_id, status, saga_id) "
            "VALUES (%s, 'p-1', 2, %s, 'placed', %s)",
            (order_id, effect_id("res", happened.saga_id, 1), happened.saga_id),
        )

    # without --resolve-suspects: reported, nothing changed
    before = await journal.read(happened.saga_id)
    told = await cli("reconcile", happened.saga_id, "--json")
    assert told.code == 1, told.stderr
    suspect = calls(told)[(happened.saga_id, seq)]
    assert (suspect["journal"], suspect["exists"], suspect["verdict"]) == (
        "no outcome",
        True,
        "suspect",
    )
    assert await journal.read(happened.saga_id) == before

    resolved = await cli("reconcile", happened.saga_id, "--resolve-suspects")
    assert resolved.code == 0, resolved.stdout + resolved.stderr
    assert "resolved by probe:create_order: the call happened" in resolved.stdout
    rows = await journal.read(happened.saga_id)
    assert rows[seq].phase is Phase.EXECUTED
    assert json.loads(rows[seq].payload) == {
        "$resolution": True,
        "resolved_by": "probe:create_order",
        "result": {"order_id": order_id, "product_id": "p-1", "quantity": 2},
    }
    # the next step got the order the probe found; rejected there, the saga undoes the order
    waiting = await wait_for(happened.handle, awaiting_approval, timeout=60)
    assert waiting.pending_approval is not None and order_id in waiting.pending_approval.input_json
    await happened.handle.signal(
        "reject", Reject(journal_seq=waiting.pending_approval.journal_seq, approver="alice")
    )
    assert (await happened.handle.result()).status is SagaState.COMPENSATED
    assert ("create_order", "COMPENSATED") in await phases(journal, happened.saga_id)
    async with shop.pool.connection() as conn:
        cur = await conn.execute("SELECT status FROM orders WHERE id = %s", (order_id,))
        assert await cur.fetchone() == ("cancelled",)
    after = await cli("reconcile", happened.saga_id)
    assert after.code == 0, after.stdout + after.stderr

    # no order for the other one: resolved as not happened, and its reservation undone
    resolved = await cli("reconcile", not_happened.saga_id, "--resolve-suspects", "--json")
    assert resolved.code == 0, resolved.stderr
    assert calls(resolved)[(not_happened.saga_id, seq)]["verdict"] == "resolved"
    assert (await not_happened.handle.result()).status is SagaState.COMPENSATED
    rows = await journal.read(not_happened.saga_id)
    assert rows[seq].phase is Phase.FAILED
    assert "probe:create_order: the call did not happen" in rows[seq].payload
    assert (await shop.snapshot()).available["p-1"] == 10


async def test_with_a_keyring_the_resolution_is_signed_by_a_key_trusted_for_the_probe(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    cli: Cli,
    shop: Shop,
    journal: JournalStore,
    settings: Settings,
) -> None:
    """Workers that check decisions against the keyring take ``probe:create_order``'s word only
    when a key trusted for it signed: the service key, not the approver key (alice's alone)."""
    await shop.arm_fault("create_order", "", delay_s=60)
    first = await start_worker()
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(options=OPTIONS),
        id=f"reconcile-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await intent_written(journal, handle.id, "create_order")
    assert first.proc is not None
    first.proc.kill()  # mid-call: create_order's INTENT has no outcome
    first.proc.wait()
    await forget_killed_worker(temporal_client, handle.id)
    await start_worker()
    status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
    assert status.suspect is not None and status.suspect.tool_name == "create_order"
    keyring = {"SAGACITY_KEYRING": str(settings.keyring)}

    alices = await cli(
        "reconcile", handle.id, "--resolve-suspects",
        extra_env={**keyring, "SAGACITY_APPROVER_KEY": str(settings.approver_key)},
    )  # fmt: skip
    assert alices.code == 1, alices.stdout + alices.stderr
    assert "not resolved" in alices.stdout and "probe:create_order" in alices.stdout
    assert (await handle.query("status", result_type=SagaStatus)).state is SagaState.SUSPECT

    services = await cli(
        "reconcile", handle.id, "--resolve-suspects", "--json",
        # the service key signs a probe's word (it may sign for anyone), the approver key not
        extra_env={
            **keyring,
            "SAGACITY_APPROVER_KEY": str(settings.approver_key),
            "SAGACITY_SERVICE_KEY": str(settings.service_key),
        },
    )  # fmt: skip
    assert services.code == 0, services.stdout + services.stderr
    assert (await handle.result()).status is SagaState.COMPENSATED  # no order: did not happen
    row = (await journal.read(handle.id))[status.suspect.call_seq]
    assert row.phase is Phase.FAILED and "probe:create_order" in row.payload


async def test_bad_input_is_a_clear_error_and_changes_nothing(
    make_suspects: MakeSuspects, cli: Cli, journal: JournalStore, tmp_path: Path
) -> None:
    (suspect,) = await make_suspects(1)
    # an app of the user's own whose tools declare no probe
    (tmp_path / "no_probes.py").write_text(
        "from sagacity import Reversibility, compensable\n\n"
        "@compensable(reversibility=Reversibility.IRREVERSIBLE)\n"
        "def ping() -> None: ...\n\n"
        "TOOLS = [ping]\n"
    )
    path = {"PYTHONPATH": str(tmp_path)}
    before = await journal.read(suspect.saga_id)
    refusals = (
        ((), "give a saga id or --all"),
        ((suspect.saga_id, "--all"), "give a saga id or --all"),
        (("no-such-saga",), "no saga 'no-such-saga' in the journal"),
        (("a\x01b",), "saga id"),
        ((suspect.saga_id, "--app", "no_such_app"), "cannot load app no_such_app"),
        ((suspect.saga_id, "--app", "no_probes"), "no tool of no_probes declares a probe"),
        ((suspect.saga_id, "--database-url", "postgresql://nobody@127.0.0.1:1/x"), "connect"),
    )
    # each is refused before it changes anything, so they run at once
    *results, unreachable = await asyncio.gather(
        *(cli("reconcile", *args, "--resolve-suspects", extra_env=path) for args, _ in refusals),
        cli(
            "reconcile",
            suspect.saga_id,
            "--resolve-suspects",
            extra_env={"TEMPORAL_ADDRESS": "127.0.0.1:1"},
        ),
    )
    for (args, said), result in zip(refusals, results, strict=True):
        assert result.code == 2, (args, result.stdout, result.stderr)
        assert said in result.stderr and "Traceback" not in result.stderr, (args, result.stderr)
    assert unreachable.code == 2 and "cannot reach Temporal" in unreachable.stderr
    assert await journal.read(suspect.saga_id) == before
    status = await wait_for(suspect.handle, lambda s: s.state is SagaState.SUSPECT)
    assert status.refused_decisions == []
    await suspect.handle.terminate("test done")


async def test_every_saga_and_calls_the_journal_shows_redacted(
    endpoints: Endpoints, cli: Cli
) -> None:
    """``--all`` on a journal of its own: a redacted call is not probed, and says so."""
    async with scratch_database(endpoints, "sagacity_reconcile") as (_, app_url):
        async with await JournalStore.open(app_url) as journal:
            given = json.dumps({"product_id": "p-1", "quantity": 2})
            secret = json.dumps({"product_id": {"$redacted": "removed"}, "quantity": 2})
            for saga_id, text in (("plain", given), ("hidden", secret)):
                await journal.append(Draft(saga_id, "create_order", Phase.INTENT, text, ""))
                await journal.append(
                    Draft(saga_id, "create_order", Phase.EXECUTED, text, json.dumps({"x": 1}))
                )
        result = await cli("reconcile", "--all", "--json", "--database-url", app_url)
    assert result.code == 1, result.stderr
    found = calls(result)
    assert found[("plain", 1)]["verdict"] == "drift"  # no such order in this shop
    assert found[("hidden", 1)]["verdict"] == "redacted"
    assert found[("hidden", 1)]["detail"].startswith("cannot probe (redacted)")
    assert "/product_id" in found[("hidden", 1)]["detail"]
    assert "2 sagas, 2 calls probed: 1 drift, 1 redacted" in result.stderr


async def test_a_probe_that_fails_is_reported_not_taken_for_an_answer(
    endpoints: Endpoints, cli: Cli, tmp_path: Path
) -> None:
    """An app of the user's own: a sync probe that raises, one that answers neither yes nor no."""
    (tmp_path / "flaky_probes.py").write_text(
        "from sagacity import ProbeContext, Reversibility, compensable\n\n"
        "@compensable(reversibility=Reversibility.IRREVERSIBLE)\n"
        "def ping(host: str) -> None: ...\n\n"
        "@ping.probe\n"
        "def pinged(ctx: ProbeContext) -> bool:\n"
        "    raise RuntimeError(f'no route to {ctx.input[\"host\"]}')\n\n"
        "@compensable(reversibility=Reversibility.IRREVERSIBLE)\n"
        "def pong(host: str) -> None: ...\n\n"
        "@pong.probe\n"
        "def ponged(ctx: ProbeContext) -> bool:\n"
        "    return 'maybe'  # type: ignore[return-value]\n\n"
        "TOOLS = [ping, pong]\n"
    )
    async with scratch_database(endpoints, "sagacity_reconcile") as (_, app_url):
        async with await JournalStore.open(app_url) as journal:
            for tool in ("ping", "pong", "unknown_tool"):
                given = json.dumps({"host": "db-1"})
                await journal.append(Draft("flaky", tool, Phase.INTENT, given, ""))
                await journal.append(Draft("flaky", tool, Phase.EXECUTED, given, "null"))
        result = await cli(
            "reconcile", "flaky", "--app", "flaky_probes", "--database-url", app_url,
            extra_env={"PYTHONPATH": str(tmp_path)},
        )  # fmt: skip
    assert result.code == 1, result.stdout + result.stderr
    assert "the probe raised RuntimeError: no route to db-1" in result.stdout
    assert "the probe returned 'maybe', not a bool or Found" in result.stdout
    assert (
        "2 probe_failed; 1 calls of tools without a probe; 1 sagas need a person" in result.stdout
    )
