"""Sagas under what operators and clients do, while the worker dies and Postgres goes away.

``test_operations_chaos`` runs the ``operations`` profile: Order sagas and steps sagas (with an
idempotent courier call that times out) are approved, rejected, aborted at random moments or
right after an approval, cancelled through Temporal, pestered with malformed signals and updates
(some as raw bytes: 10k-deep JSON, lone surrogates, invalid UTF-8), terminated and rolled back,
reset, halted while compensating, given a 3 MB argument mid-saga, and followed by new sagas under
their ids; meanwhile the worker is SIGKILLed and Postgres is down for 15 to 20 seconds at a time,
by a fast shutdown and by a crash. Afterwards every saga has ended, no tool ran twice, every
effect is undone unless the saga completed or a human is told, every chain verifies, nothing a
bad signal or a refused saga id did shows anywhere, and ``sagacity certify`` fails exactly the
sagas with something live.

``test_operator_moves`` runs one saga per operator move (terminate + rollback, reset, keep halt,
3 MB argument) with nothing else going on; ``test_temporal_killed_under_sagacity_dev`` runs
sagas on a ``sagacity dev`` stack whose Temporal server is SIGKILLed twice.

``test_sagas_in_flight_ride_out_a_postgres_outage`` is the acceptance line for outages: 20 sagas
in flight, Postgres away for 15 s, and every saga ends exactly as decided, with no SUSPECT call,
no failed compensation and nothing flagged for a human.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import shutil
import signal
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from temporalio.client import Client

from sagacity.devstack import DevStack
from sagacity.journal import Phase
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.plugin import SagacityPlugin
from tests.chaos.operations import STEPS_ONLY, Fate, OpsPlan
from tests.chaos.operations_run import (
    Chaos,
    OpsProfile,
    OpsReport,
    OutageMode,
    ops_plans,
    run_operations,
)
from tests.test_dev_supervise import RESTARTED_TEMPORAL, DevProcess

pytestmark = pytest.mark.chaos


@contextlib.contextmanager
def log_kept_on_failure(settings: Settings, log: Path) -> Iterator[None]:
    """A failing check keeps the worker's log (the chaos folder is removed after the tests)."""
    try:
        yield
    except AssertionError:
        kept = settings.data_dir.expanduser().resolve() / "chaos-logs" / log.name
        kept.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, kept)
        print(f"worker log kept: {kept}")
        raise


def assert_clean(report: OpsReport) -> None:
    print(report.summary())
    assert not report.violations, "\n".join([report.summary(), *report.violations])


async def test_operations_chaos(
    chaos_stack: DevStack,
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
    ops_profile: OpsProfile,
    rng: random.Random,
    settings: Settings,
) -> None:
    plans = ops_plans(ops_profile, rng)

    async def disrupt(chaos: Chaos) -> None:
        await chaos.run(ops_profile)

    report = await run_operations(
        test="operations",
        profile=ops_profile.name,
        client=chaos_client,
        stack=chaos_stack,
        database_url=chaos_database,
        plans=plans,
        rng=rng,
        log_dir=chaos_dir,
        disrupt=disrupt,
        window_s=ops_profile.window_s,
        drain_s=ops_profile.drain_s,
        concurrency=ops_profile.concurrency,
    )
    with log_kept_on_failure(settings, chaos_dir / "operations.log"):
        assert_clean(report)
        assert report.disruptions["worker kills"] >= ops_profile.kills
        outages = [n for what, n in report.disruptions.items() if what.startswith("Postgres")]
        assert sum(outages) == ops_profile.outages
        # the run did what it says: each kind of operation reached sagas that were running
        reached = {o.plan.fate for o in report.outcomes if o.disrupted}
        assert {Fate.CANCEL_AT_GATE, Fate.ABORT_AFTER_APPROVE} <= reached


OUTAGE_S = 15.0
IN_FLIGHT = 20


@pytest.mark.parametrize("mode", ["fast", "immediate", "killed"])
async def test_sagas_in_flight_ride_out_a_postgres_outage(
    mode: OutageMode,
    chaos_stack: DevStack,
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
    rng: random.Random,
    settings: Settings,
) -> None:
    # two thirds approved (some through the decide update), a third rejected; all started
    # within two seconds, and each of the first two calls stalls a second: when Postgres goes,
    # sagas are mid-call, between calls, at their gate and being decided
    plans = [
        OpsPlan(
            saga_id=f"outage-{mode}-{i:02d}-{uuid4().hex[:6]}",
            fate=Fate.REJECT if i % 3 == 2 else Fate.COMPLETE,
            product_id=rng.choice(["p-1", "p-2"]),
            quantity=rng.randint(1, 3),
            start_after_s=rng.uniform(0.0, 2.0),
            decide_by="update" if i % 4 == 1 else "signal",
            heartbeat_timeout_s=None,  # nobody is killed here: the tools' own 30 s
        )
        for i in range(IN_FLIGHT)
    ]

    async def outage(chaos: Chaos) -> None:
        await asyncio.sleep(2.5)
        await chaos.outage(mode, OUTAGE_S)

    test = f"outage-{mode}"
    report = await run_operations(
        test=test,
        profile=f"{IN_FLIGHT} sagas, {OUTAGE_S:.0f} s {mode} outage",
        client=chaos_client,
        stack=chaos_stack,
        database_url=chaos_database,
        plans=plans,
        rng=rng,
        log_dir=chaos_dir,
        disrupt=outage,
        window_s=OUTAGE_S + 5.0,
        drain_s=180.0,
        concurrency=IN_FLIGHT,
        stall_s=1.0,
    )
    with log_kept_on_failure(settings, chaos_dir / f"{test}.log"):
        await assert_as_decided(report, plans, chaos_database)


async def assert_as_decided(report: OpsReport, plans: list[OpsPlan], database_url: str) -> None:
    """Every saga ended as decided, and nothing the outage alone did shows."""
    assert_clean(report)
    # the outage hit sagas in flight: mid-call, between calls, at their gate
    (in_flight,) = report.in_flight_at_outages
    assert sum(in_flight.values()) >= IN_FLIGHT * 3 // 4, in_flight
    assert not [o.plan.saga_id for o in report.outcomes if o.suspects_seen], "SUSPECT calls"
    async with await JournalStore.open(database_url) as journal:
        failed = {
            plan.saga_id: [
                (r.tool_name, json.loads(r.payload).get("type"))
                for r in await journal.read(plan.saga_id)
                if r.phase in (Phase.FAILED, Phase.COMPENSATION_FAILED)
            ]
            for plan in plans
        }
    failed = {sid: calls for sid, calls in failed.items() if calls}
    assert not failed
    ended = {o.plan.saga_id: o.result.status if o.result else None for o in report.outcomes}
    assert ended == {p.saga_id: p.expected for p in plans}, report.summary()
    assert not report.judgement.flagged


async def test_operator_moves(
    chaos_stack: DevStack,
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
    rng: random.Random,
    settings: Settings,
) -> None:
    """Each of the operator's moves on a saga of its own, nothing else going wrong: a terminate
    and a rollback, a reset, a keep halt while compensations run, a 3 MB argument mid-saga, and
    decisions sent as raw bytes to each; then certify fails exactly what is live."""
    moves = (
        Fate.TERMINATE_ROLLBACK,
        Fate.RESET_COMPLETE,
        Fate.HALT_COMPENSATING,
        Fate.BIG_ARGUMENT,
    )
    plans = [
        OpsPlan(
            saga_id=f"moves-{fate.value}-{uuid4().hex[:6]}",
            fate=fate,
            workflow="steps" if fate in STEPS_ONLY else "order",
            raw_signals=2,
            raw_updates=1,
        )
        for fate in moves
    ]

    async def calm(chaos: Chaos) -> None:
        return None

    report = await run_operations(
        test="moves",
        profile="one saga per operator move",
        client=chaos_client,
        stack=chaos_stack,
        database_url=chaos_database,
        plans=plans,
        rng=rng,
        log_dir=chaos_dir,
        disrupt=calm,
        window_s=1.0,
        drain_s=240.0,
        concurrency=len(plans),
    )
    with log_kept_on_failure(settings, chaos_dir / "moves.log"):
        assert_clean(report)
        assert {o.plan.fate for o in report.outcomes if o.disrupted} >= {
            Fate.TERMINATE_ROLLBACK,
            Fate.RESET_COMPLETE,
            Fate.HALT_COMPENSATING,
        }


KILLS_UNDER_DEV = 2


async def test_temporal_killed_under_sagacity_dev(
    chaos_stack: DevStack, chaos_dir: Path, rng: random.Random, settings: Settings
) -> None:
    """Sagas in flight on a `sagacity dev` stack whose Temporal server is SIGKILLed twice: the
    stack restarts it with its state (saying so), the worker and clients reconnect, and every
    saga ends as decided."""
    dev = DevProcess(chaos_dir / f"dev-{uuid4().hex[:6]}", session_codec=True)
    try:
        exports = dev.exports()
        database_url = exports["SAGACITY_OWNER_DATABASE_URL"]
        client = await Client.connect(
            exports["TEMPORAL_ADDRESS"],
            namespace=settings.temporal_namespace,
            plugins=[SagacityPlugin()],
        )
        plans = [
            OpsPlan(
                saga_id=f"dev-kill-{i:02d}-{uuid4().hex[:6]}",
                fate=Fate.REJECT if i % 3 == 2 else Fate.COMPLETE,
                workflow="steps" if i % 2 else "order",
                start_after_s=rng.uniform(0.0, 8.0),
                decide_by="update" if i % 4 == 1 else "signal",
            )
            for i in range(12)
        ]

        async def kill_temporal(chaos: Chaos) -> None:
            for _ in range(KILLS_UNDER_DEV):
                await asyncio.sleep(rng.uniform(2.0, 5.0))
                seen = len(dev.lines)
                os.kill(dev.temporal_pid(), signal.SIGKILL)
                chaos.done["Temporal kills under sagacity dev"] += 1
                await asyncio.to_thread(dev.wait_for, RESTARTED_TEMPORAL, after=seen)

        report = await run_operations(
            test="dev-temporal-killed",
            profile=f"12 sagas, Temporal SIGKILLed {KILLS_UNDER_DEV} times under `sagacity dev`",
            client=client,
            stack=chaos_stack,
            database_url=database_url,
            plans=plans,
            rng=rng,
            log_dir=chaos_dir,
            disrupt=kill_temporal,
            window_s=20.0,
            drain_s=180.0,
            concurrency=len(plans),
        )
        with log_kept_on_failure(settings, chaos_dir / "dev-temporal-killed.log"):
            assert_clean(report)
            ended = {o.plan.saga_id: o.result.status if o.result else None for o in report.outcomes}
            assert ended == {p.saga_id: p.expected for p in plans}, report.summary()
            assert report.disruptions["Temporal kills under sagacity dev"] == KILLS_UNDER_DEV
            assert dev.proc.poll() is None, dev.output  # still running: two restarts of three
    finally:
        dev.stop()
