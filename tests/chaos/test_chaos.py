"""Order sagas survive a killed worker, a restarted Postgres and a restarted Temporal server.

Each test runs a mix of completing, failing and rejected sagas through a worker process while it
breaks one thing repeatedly, plays the humans (approvals, SUSPECT resolutions), and then checks
that every saga ended, every chain verifies, and the shop's tables agree with the journal.
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter
from pathlib import Path

import pytest
from temporalio.client import Client

from sagacity.devstack import DevStack
from tests.chaos.harness import WorkerProcess
from tests.chaos.scenario import Profile, Report, run_chaos

pytestmark = pytest.mark.chaos


def assert_clean(report: Report) -> None:
    print(report.summary())
    assert not report.violations, "\n".join([report.summary(), *report.violations])


async def test_worker_killed_mid_saga(
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
    profile: Profile,
    rng: random.Random,
) -> None:
    async def kill_repeatedly(worker: WorkerProcess) -> Counter[str]:
        done: Counter[str] = Counter()
        for _ in range(profile.kills):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            worker.kill()
            done["worker kills"] += 1
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            await worker.start()
        return done

    report = await run_chaos(
        test="worker-kills",
        client=chaos_client,
        database_url=chaos_database,
        profile=profile,
        rng=rng,
        log_dir=chaos_dir,
        disrupt=kill_repeatedly,
        window_s=profile.kills * 4.0,
    )
    assert report.disruptions["worker kills"] >= profile.kills
    assert_clean(report)


async def test_postgres_restarted_mid_saga(
    chaos_stack: DevStack,
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
    profile: Profile,
    rng: random.Random,
) -> None:
    async def restart_repeatedly(worker: WorkerProcess) -> Counter[str]:
        done: Counter[str] = Counter()
        for i in range(profile.restarts):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            # alternate a clean shutdown with a crash (no checkpoint: recovery replays the WAL)
            await chaos_stack.restart_postgres(
                mode="immediate" if i % 2 == 0 else "fast", downtime=rng.uniform(0.5, 2.0)
            )
            done["Postgres restarts"] += 1
        return done

    report = await run_chaos(
        test="postgres-restarts",
        client=chaos_client,
        database_url=chaos_database,
        profile=profile,
        rng=rng,
        log_dir=chaos_dir,
        disrupt=restart_repeatedly,
        window_s=profile.restarts * 4.0,
    )
    assert_clean(report)


async def test_temporal_restarted_mid_saga(
    chaos_stack: DevStack,
    chaos_client: Client,
    chaos_database: str,
    chaos_dir: Path,
    profile: Profile,
    rng: random.Random,
) -> None:
    async def restart_repeatedly(worker: WorkerProcess) -> Counter[str]:
        done: Counter[str] = Counter()
        for _ in range(profile.restarts):
            await asyncio.sleep(rng.uniform(1.0, 3.0))
            await chaos_stack.restart_temporal(kill=True, downtime=rng.uniform(0.5, 2.0))
            done["Temporal restarts"] += 1
        return done

    report = await run_chaos(
        test="temporal-restarts",
        client=chaos_client,
        database_url=chaos_database,
        profile=profile,
        rng=rng,
        log_dir=chaos_dir,
        disrupt=restart_repeatedly,
        window_s=profile.restarts * 4.0,
    )
    assert_clean(report)
