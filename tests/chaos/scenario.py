"""One chaos run: Order sagas through a worker process while something is broken on purpose.

The mix: about a third of the confirmations are rejected, some approved confirmations fail (an
armed fault), the rest complete. The first two steps stall a little, so a kill or restart often
lands mid-call. After the disruption every saga must end, and :mod:`tests.chaos.invariants` hold.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from uuid import uuid4

from temporalio.client import Client

from tests.chaos.harness import Driver, Outcome, Plan, WorkerProcess
from tests.chaos.invariants import check
from workflows.order.shop import Shop

#: stock per product at the start, enough that no saga runs out
STOCK = 1_000
#: each of the first two steps stalls this long before acting, widening the window for chaos
STALL_S = 0.25


@dataclass(frozen=True)
class Profile:
    """How hard a chaos run pushes: ``SAGACITY_CHAOS`` picks one of :data:`PROFILES`."""

    name: str
    #: Order sagas per test
    sagas: int
    #: worker SIGKILLs in the worker test
    kills: int
    #: Postgres or Temporal restarts in their tests
    restarts: int
    #: how long, after the disruptions, every saga has to finish
    drain_s: float


PROFILES = {
    "short": Profile("short", sagas=12, kills=3, restarts=1, drain_s=120.0),
    "long": Profile("long", sagas=50, kills=8, restarts=3, drain_s=300.0),
}

#: breaks something, repeatedly, while the sagas run; returns what it did, by name
Disruption = Callable[[WorkerProcess], Awaitable[Counter[str]]]


@dataclass
class Report:
    """What one chaos run did and what it found."""

    test: str
    profile: str
    outcomes: list[Outcome]
    disruptions: Counter[str]
    worker_starts: int
    violations: list[str]
    seconds: float

    @property
    def states(self) -> Counter[str]:
        return Counter(
            o.result.status.value if o.result else f"unfinished ({o.error})" for o in self.outcomes
        )

    @property
    def suspects(self) -> list[tuple[int, str, bool]]:
        return [r for o in self.outcomes for r in o.resolved]

    def summary(self) -> str:
        happened = sum(1 for _, _, h in self.suspects if h)
        return (
            f"chaos {self.test} [{self.profile}]: {len(self.outcomes)} sagas "
            f"({', '.join(f'{n} {s}' for s, n in sorted(self.states.items()))}); "
            f"{', '.join(f'{n} {what}' for what, n in sorted(self.disruptions.items()))}; "
            f"{self.worker_starts} worker starts; {len(self.suspects)} SUSPECT calls resolved "
            f"({happened} had happened); {len(self.violations)} invariant violations; "
            f"{self.seconds:.0f}s"
        )


def plans(n: int, rng: random.Random) -> list[Plan]:
    return [
        Plan(
            saga_id=f"chaos-{i:03d}-{uuid4().hex[:6]}",
            product_id=rng.choice(["p-1", "p-2"]),
            quantity=rng.randint(1, 3),
            decision="reject" if i % 3 == 2 else "approve",
        )
        for i in range(n)
    ]


async def prepare_shop(
    database_url: str, *, failures: int, stall_s: float = STALL_S
) -> dict[str, int]:
    """Seeded tables, ample stock, stalls on the first two steps, ``failures`` failing mails."""
    shop = await Shop.open(database_url)
    try:
        await shop.setup(reset=True)
        async with shop.pool.connection() as conn:
            await conn.execute("UPDATE inventory SET available = %s", (STOCK,))
        for tool in ("reserve_inventory", "create_order"):
            await shop.arm_fault(tool, "", times=-1, delay_s=stall_s)
        await shop.arm_fault("send_confirmation", "chaos: relay refused", times=failures)
        return (await shop.snapshot()).available
    finally:
        await shop.close()


async def run_chaos(
    *,
    test: str,
    client: Client,
    database_url: str,
    profile: Profile,
    rng: random.Random,
    log_dir: Path,
    disrupt: Disruption,
    window_s: float,
) -> Report:
    """Start the sagas over ``window_s`` seconds while ``disrupt`` runs; drain; check."""
    began = time.monotonic()
    task_queue = f"chaos-{uuid4().hex[:8]}"
    stock = await prepare_shop(database_url, failures=max(1, profile.sagas // 4))
    worker = WorkerProcess(
        client, task_queue=task_queue, database_url=database_url, log_path=log_dir / f"{test}.log"
    )
    driver = Driver(client, task_queue=task_queue, database_url=database_url)
    await worker.start()
    deadline = time.monotonic() + window_s + profile.drain_s

    async def saga(plan: Plan) -> Outcome:
        await asyncio.sleep(rng.uniform(0, window_s * 0.6))
        return await driver.run(plan, deadline=deadline)

    died: list[str] = []
    runs = [asyncio.create_task(saga(plan)) for plan in plans(profile.sagas, rng)]
    try:
        disruptions = await disrupt(worker)
        if not worker.alive():  # a disruption it should have ridden out
            died.append(f"the worker exited on its own during the disruptions: {worker.log_tail()}")
            await worker.start()
        outcomes = await asyncio.gather(*runs)
        if not worker.alive():
            died.append(f"the worker exited on its own while sagas drained: {worker.log_tail()}")
    finally:
        for run in runs:  # only unfinished when the disruption itself failed
            run.cancel()
        worker.stop()
    violations = died + await check(database_url, outcomes, stock)
    return Report(
        test=test,
        profile=profile.name,
        outcomes=outcomes,
        disruptions=disruptions,
        worker_starts=worker.starts,
        violations=violations,
        seconds=time.monotonic() - began,
    )
