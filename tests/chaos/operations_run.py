"""One operations chaos run: many planned sagas, a worker that is killed, a Postgres that goes away.

Sagas start over the profile's window, each run by :class:`~tests.chaos.operations.OpsDriver`;
meanwhile the worker is SIGKILLed and Postgres goes away (a fast shutdown, an ``immediate`` one,
which is a crash, or a SIGKILLed postmaster) for longer than a retry budget: 15 to 20 seconds,
beyond the pools' 10 s wait for a connection and Temporal's retry backoff. Then every saga must
end and :func:`~tests.chaos.operations_checks.judge` find nothing, and ``sagacity certify`` fail
exactly the sagas a person must look at (:mod:`tests.chaos.operations_certify`).
"""

from __future__ import annotations

import asyncio
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from uuid import uuid4

from temporalio.client import Client

from sagacity.devstack import DevStack, PostgresStopMode
from tests.chaos.harness import WorkerProcess
from tests.chaos.operations import STEPS_ONLY, Fate, OpsDriver, OpsOutcome, OpsPlan, Reuse
from tests.chaos.operations_certify import CertifyVerdict, certify_run
from tests.chaos.operations_checks import Judgement, judge
from tests.chaos.scenario import prepare_shop

CHAOS_WORKER = "tests.chaos.worker"

#: what the worker logs while it waits for its database: a journal write, a pool reconnecting
DATABASE_WAITS = ("journal database unavailable, retrying", "psycopg.pool")

#: how Postgres goes away: ``pg_ctl stop -m fast`` or ``-m immediate`` (a crash: no checkpoint,
#: recovery replays the WAL), or ``killed``: SIGKILL to the postmaster
OutageMode = PostgresStopMode | Literal["killed"]


@dataclass(frozen=True)
class OpsProfile:
    """How hard the operations run pushes (``SAGACITY_CHAOS`` picks one, see conftest)."""

    name: str
    sagas: int
    #: worker SIGKILLs, at random moments (some inside an outage)
    kills: int
    #: Postgres outages, fast, immediate (a crash) and killed (SIGKILL) in turn
    outages: int
    #: sagas start over this many seconds; the kills and outages happen meanwhile
    window_s: float
    #: after the window, how long every saga has to end
    drain_s: float
    #: sagas in flight at most
    concurrency: int
    outage_s: tuple[float, float] = (15.0, 20.0)


OPS_PROFILES = {
    "operations": OpsProfile(
        "operations", sagas=44, kills=3, outages=3, window_s=70.0, drain_s=240.0, concurrency=44
    ),
    "operations-long": OpsProfile(
        "operations-long",
        sagas=520,
        kills=24,
        outages=10,
        window_s=480.0,
        drain_s=1200.0,
        concurrency=40,
    ),
}

#: one round of fates, shuffled again for each round: every fate shows up in a short run
_DECK = [
    *[Fate.COMPLETE] * 6,
    *[Fate.REJECT] * 3,
    *[Fate.COURIER_FAILS] * 2,
    *[Fate.ABORT] * 2,
    *[Fate.ABORT_AFTER_APPROVE] * 2,
    *[Fate.CANCEL] * 2,
    *[Fate.CANCEL_AT_GATE] * 2,
    Fate.TERMINATE_ROLLBACK,
    Fate.RESET_COMPLETE,
    Fate.HALT_COMPENSATING,
    Fate.BIG_ARGUMENT,
]


def ops_plans(profile: OpsProfile, rng: random.Random) -> list[OpsPlan]:
    fates: list[Fate] = []
    while len(fates) < profile.sagas:
        fates += rng.sample(_DECK, len(_DECK))
    plans = []
    reuses: list[Reuse] = ["none", "after", "while-running"]
    for i, fate in enumerate(fates[: profile.sagas]):
        steps = fate in STEPS_ONLY or rng.random() < 0.35
        plans.append(
            OpsPlan(
                saga_id=f"ops-{i:03d}-{uuid4().hex[:6]}",
                fate=fate,
                workflow="steps" if steps else "order",
                product_id=rng.choice(["p-1", "p-2"]),
                quantity=rng.randint(1, 3),
                slow_attempts=3 if fate is Fate.COURIER_FAILS else rng.choice([0, 0, 1, 2]),
                start_after_s=rng.uniform(0, profile.window_s * 0.8),
                disrupt_after_s=rng.uniform(0.0, 8.0),
                bad_signals=rng.choice([0, 0, 1, 2, 3]),
                bad_updates=rng.choice([0, 0, 0, 1, 2]),
                raw_signals=rng.choice([0, 0, 1, 2]),
                raw_updates=rng.choice([0, 0, 0, 1]),
                decide_by="update" if rng.random() < 0.3 else "signal",
                reuse=rng.choices(reuses, weights=[6, 3, 1])[0],
            )
        )
    return plans


class Chaos:
    """Kills the worker and takes Postgres away; counts what it did and what went wrong."""

    def __init__(
        self, stack: DevStack, worker: WorkerProcess, driver: OpsDriver, rng: random.Random
    ) -> None:
        self.stack = stack
        self.worker = worker
        self.driver = driver
        self.rng = rng
        self.done: Counter[str] = Counter()
        #: the worker exited without being killed
        self.died: list[str] = []
        #: per outage, where the sagas in flight were when Postgres went
        self.in_flight_at_outages: list[Counter[str]] = []

    def in_flight(self) -> Counter[str]:
        """Where the running sagas are, as the driver last saw them: state, or the tool running."""
        return Counter(
            "not started yet"
            if o.last is None
            else f"calling {o.last.running}"
            if o.last.running
            else o.last.state.value
            for o in self.driver.running.values()
        )

    async def restart(self, *, until: float) -> None:
        """Start the worker as a supervisor would: again after a pause while it cannot start."""
        while True:
            try:
                await self.worker.start(timeout=max(5.0, until - time.monotonic()))
                return
            except (RuntimeError, TimeoutError):
                self.worker.kill()  # a start that timed out leaves the process behind
                self.done["worker starts that failed"] += 1
                if time.monotonic() > until:
                    raise
                await asyncio.sleep(2.0)

    def check_alive(self, when: str) -> None:
        if not self.worker.alive():
            self.died.append(f"the worker exited on its own {when}: {self.worker.log_tail()}")

    async def kill(self) -> None:
        self.check_alive("before a kill")
        self.worker.kill()
        self.done["worker kills"] += 1
        await asyncio.sleep(self.rng.uniform(0.0, 1.0))
        await self.restart(until=time.monotonic() + 120)

    async def stop_postgres(self, mode: OutageMode) -> None:
        if mode != "killed":
            await self.stack.stop_postgres(mode=mode)
            return
        # SIGKILL to the postmaster: its backends are left to notice, nothing is cleaned up
        log = self.stack.postgres_log
        assert log is not None, "the chaos stack runs its own Postgres"
        pid = int((log.parent / "postmaster.pid").read_text().split()[0])
        os.kill(pid, signal.SIGKILL)

    async def outage(self, mode: OutageMode, downtime: float, *, kill_inside: bool = False) -> None:
        """Postgres down for ``downtime`` seconds; ``kill_inside``: the worker is killed meanwhile
        and restarted at once, as a supervisor would, while its database is still away."""
        self.check_alive("before an outage")
        self.in_flight_at_outages.append(self.in_flight())
        began = time.monotonic()
        await self.stop_postgres(mode)
        self.done[f"Postgres outages ({mode})"] += 1
        restarting = None
        if kill_inside:
            await asyncio.sleep(self.rng.uniform(1.0, downtime / 2))
            self.worker.kill()
            self.done["worker kills during an outage"] += 1
            restarting = asyncio.create_task(self.restart(until=time.monotonic() + 180))
        await asyncio.sleep(max(0.0, downtime - (time.monotonic() - began)))
        await self.stack.start_postgres()
        self.done["seconds without Postgres"] += round(time.monotonic() - began)
        if restarting is not None:
            await restarting
        else:
            self.check_alive("during an outage")
            if not self.worker.alive():
                await self.restart(until=time.monotonic() + 120)

    async def run(self, profile: OpsProfile) -> Counter[str]:
        """The profile's kills and outages, in random order, spread over its window."""
        events = ["kill"] * profile.kills + ["outage"] * profile.outages
        self.rng.shuffle(events)
        modes: list[OutageMode] = ["fast", "immediate", "killed"]
        self.rng.shuffle(modes)
        gap = profile.window_s / (len(events) + 1)
        outages = 0
        for event in events:
            await asyncio.sleep(self.rng.uniform(0.3, 1.0) * gap)
            if event == "kill":
                await self.kill()
            else:
                await self.outage(
                    modes[outages % len(modes)],
                    self.rng.uniform(*profile.outage_s),
                    kill_inside=self.rng.random() < 0.4,
                )
                outages += 1
        return self.done


@dataclass
class OpsReport:
    test: str
    profile: str
    outcomes: list[OpsOutcome]
    disruptions: Counter[str]
    worker_starts: int
    judgement: Judgement
    seconds: float
    died: list[str] = field(default_factory=list)
    #: per outage, where the sagas in flight were when Postgres went
    in_flight_at_outages: list[Counter[str]] = field(default_factory=list)
    #: the worker's log lines saying it waited for its database (journal writes, pools)
    database_waits: int = 0
    #: what ``sagacity certify`` said at the end
    certify: CertifyVerdict | None = None

    @property
    def violations(self) -> list[str]:
        certified = self.certify.violations if self.certify else []
        return self.died + self.judgement.violations + certified

    def summary(self) -> str:
        outcomes, j = self.outcomes, self.judgement
        states = Counter(o.result.status.value if o.result else "no end" for o in outcomes)
        fates = Counter(o.plan.fate.value for o in outcomes)
        signals: Counter[str] = sum((o.signals for o in outcomes), Counter())
        updates: Counter[str] = sum((o.updates for o in outcomes), Counter())
        reuse = Counter(r.split(":")[-1].strip() for o in outcomes for r in o.reuse)
        resolved = [r for o in outcomes for r in o.resolved]
        disrupted = Counter(o.plan.fate.value for o in outcomes if o.disrupted)
        rollbacks = Counter(
            "missing" if o.rollback.missing else f"exit {o.rollback.code}"
            for o in outcomes
            if o.rollback
        )
        holds = [o.hold.undone_at_lift - o.hold.undone_at_halt for o in outcomes if o.hold]

        def listed(counter: Counter[str]) -> str:
            return ", ".join(f"{n} {what}" for what, n in sorted(counter.items())) or "none"

        return "\n".join(
            [
                f"chaos {self.test} [{self.profile}]: {len(outcomes)} sagas in "
                f"{self.seconds:.0f}s; ended: {listed(states)}",
                f"  planned: {listed(fates)}",
                f"  done to them: {listed(self.disruptions)}; {self.worker_starts} worker starts; "
                f"{self.database_waits} log lines of the worker waiting for its database",
                *(
                    f"  in flight when Postgres went: {listed(at)}"
                    for at in self.in_flight_at_outages
                ),
                f"  aborts and cancels delivered: {listed(disrupted)}; confirmations sent "
                f"although aborted right after approval: {j.sent_despite_abort}",
                f"  id reuse: {listed(reuse)}",
                f"  rollbacks after terminate: {listed(rollbacks)}; resets: "
                f"{sum(1 for o in outcomes if o.reset_run)}; undos under a keep halt: {holds}",
                f"  bad signals delivered: {listed(signals)}; bad decide updates: "
                f"{listed(updates)}",
                f"  SUSPECT calls resolved: {len(resolved)} "
                f"({sum(1 for _, _, h in resolved if h)} had happened); "
                f"courier attempts retried: {j.courier_retries}",
                f"  ended otherwise than planned, for a journaled reason: {listed(j.deviations)}",
                f"  flagged for a human: {len(j.flagged)}"
                + "".join(f"\n    {f}" for f in j.flagged),
                f"  {self.certify.summary() if self.certify else 'certify: not run'}",
                f"  invariant violations: {len(self.violations)}",
            ]
        )


#: the disruption of one run: given the Chaos, breaks things; returns when done
Disrupt = Callable[[Chaos], Awaitable[object]]


async def run_operations(
    *,
    test: str,
    profile: str,
    client: Client,
    stack: DevStack,
    database_url: str,
    plans: list[OpsPlan],
    rng: random.Random,
    log_dir: Path,
    disrupt: Disrupt,
    drain_s: float,
    window_s: float,
    concurrency: int,
    stall_s: float = 0.25,
) -> OpsReport:
    """Run ``plans`` through a chaos worker while ``disrupt`` runs; drain; judge."""
    began = time.monotonic()
    task_queue = f"ops-{uuid4().hex[:8]}"
    stock = await prepare_shop(database_url, failures=0, stall_s=stall_s)
    worker = WorkerProcess(
        client,
        task_queue=task_queue,
        database_url=database_url,
        log_path=log_dir / f"{test}.log",
        module=CHAOS_WORKER,
    )
    driver = OpsDriver(client, task_queue=task_queue, database_url=database_url, rng=rng)
    chaos = Chaos(stack, worker, driver, rng)
    await worker.start()
    deadline = time.monotonic() + window_s + drain_s
    slots = asyncio.Semaphore(concurrency)

    async def saga(plan: OpsPlan) -> OpsOutcome:
        await asyncio.sleep(plan.start_after_s)
        async with slots:
            return await driver.run(plan, deadline=deadline)

    runs = [asyncio.create_task(saga(plan)) for plan in plans]
    try:
        await disrupt(chaos)
        outcomes = await asyncio.gather(*runs)
        chaos.check_alive("while the sagas drained")
    finally:
        for run in runs:  # only unfinished when the disruption itself failed
            run.cancel()
        worker.stop()
    judgement = await judge(database_url, outcomes, stock)
    return OpsReport(
        test=test,
        profile=profile,
        outcomes=outcomes,
        disruptions=chaos.done,
        worker_starts=worker.starts,
        judgement=judgement,
        certify=await certify_run(driver.cli_env, judgement.live),
        seconds=time.monotonic() - began,
        died=chaos.died,
        in_flight_at_outages=chaos.in_flight_at_outages,
        database_waits=sum(
            1
            for line in worker.log_path.read_text(errors="replace").splitlines()
            if any(mark in line for mark in DATABASE_WAITS)
        ),
    )
