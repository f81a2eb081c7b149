"""An activity attempt heartbeats while its body runs (carrying what an earlier attempt left),
and stops when the body ends."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from temporalio import activity
from temporalio.testing import ActivityEnvironment

from sagacity.temporal.activities.heartbeat import heartbeating


async def test_beats_carry_the_earlier_details_while_the_body_runs_and_stop_after() -> None:
    beats: list[tuple[Any, ...]] = []
    two_beats = asyncio.Event()

    def on_heartbeat(*details: Any) -> None:
        beats.append(details)
        if len(beats) >= 2:
            two_beats.set()

    env = ActivityEnvironment()
    env.info = dataclasses.replace(
        env.info, heartbeat_timeout=timedelta(seconds=0.3), heartbeat_details=["left"]
    )
    env.on_heartbeat = on_heartbeat

    @activity.defn
    async def body() -> int:
        async with heartbeating():
            await asyncio.wait_for(two_beats.wait(), timeout=30)
        return len(beats)

    during = await env.run(body)
    assert during >= 2
    assert all(details == ("left",) for details in beats)
    await asyncio.sleep(0.5)  # several intervals (0.1 s): no beat once the body ended
    assert len(beats) == during


async def test_an_attempt_leaves_nothing_for_the_cycle_collector() -> None:
    # a busy worker runs thousands of attempts: what one leaves in a reference cycle lives on
    # until the collector's full passes, which walk the whole heap, free it
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, heartbeat_timeout=timedelta(seconds=30))

    @activity.defn
    async def body() -> None:
        async with heartbeating():
            await asyncio.sleep(0)

    async def attempts(n: int) -> int:
        await env.run(body)  # whatever the environment makes once
        gc.collect()
        gc.disable()
        try:
            for _ in range(n):
                await env.run(body)
            return gc.collect()
        finally:
            gc.enable()

    # counted in a loop of their own while this one waits: the suite's loop runs other tests'
    # workers and pools, whose garbage the count would take for the attempts'
    with ThreadPoolExecutor(max_workers=1) as counting:
        left = counting.submit(asyncio.run, attempts(20)).result()
    assert left == 0
