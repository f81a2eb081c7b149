"""Sagacity's own cost per call and per saga, where a loaded server's noise cannot hide it.

``bench.saga_overhead`` and ``bench.floor`` run whole sagas through one Temporal server under
load, and their runs move by ±0.1: a change that saves a few percent of a saga's CPU does not
show there. This bench measures the worker's share alone, against ``bench.floor``'s ``floor``
kind (the journal's two durable commits a call, without Sagacity's code), the kinds alternating
round by round in one run:

* the activity path: a three-step saga's calls run as activities in Temporal's
  ``ActivityEnvironment`` (no server) against one Postgres. Sagacity's are built as a new user's
  worker builds them (``SagaActivities``: signed checkpoints, the default redaction, a keyring):
  the first call claims the journal and writes INTENT in one statement (``open_and_call``), each
  call writes its outcome, the last seals the end. The floor's step commits a row before its
  work and one after. Per call: CPU, wall time, rows written, checkpoints signed and checkpoint
  files created, and the garbage collector's passes.
* the workflow side: one recorded saga of each kind (all steps succeed) replayed by Temporal's
  ``Replayer``, Sagacity's with its converter and codec: CPU per saga replayed (the workflow
  code, the payload conversion and the SDK core's history processing, all of which a live worker
  runs for the saga's workflow tasks), with the history's events and bytes.

Not measured here: the Temporal server's and Postgres' own CPU, the RPCs between them and the
worker, and the transparency log's sequencer (``bench.saga_overhead`` and ``bench.floor`` have
those).

Run from the repository root: ``python -m bench.own_cost`` (embedded Postgres and in-memory
Temporal; set ``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` to measure your own servers).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import gc
import statistics
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from temporalio.client import Client, WorkflowHistory
from temporalio.testing import ActivityEnvironment
from temporalio.worker import Replayer, UnsandboxedWorkflowRunner, Worker

from bench import floor
from bench._support import (
    BenchStack,
    CpuMeter,
    bench_stack,
    machine,
    percentile,
    positive,
    run,
    table,
)
from bench.floor_workflow import STEPS, FloorThreeSteps
from bench.overhead_workload import TOOLS, saga_spec
from bench.sides import SAGACITY, Anchors, Rig, sagacity_plugin, sagacity_worker, witness_process
from sagacity.evidence.checkpoints import log_name
from sagacity.journal import GENESIS_HASH
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.activities import SagaActivities
from sagacity.temporal.models import CallOutcome, CallRequest, CallStatus, SagaOpen, SagaState
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.visibility import register
from sagacity.temporal.waits import OUTAGE_ALLOWANCE
from sagacity.temporal.workflow import StepsWorkflow
from sagacity.tools import ToolRegistry

FLOOR = "floor"
KINDS = (FLOOR, SAGACITY)


@dataclass
class Calls:
    """One kind's calls over the activity rounds."""

    sagas: list[str] = field(default_factory=list)
    #: CPU seconds of each round, and its calls
    cpu_s: list[tuple[float, int]] = field(default_factory=list)
    wall_s: list[float] = field(default_factory=list)
    #: the collector's passes per generation
    gc_passes: list[int] = field(default_factory=lambda: [0, 0, 0])

    @property
    def calls(self) -> int:
        return len(self.wall_s)

    def cpu_ms_a_call(self) -> float:
        """The median over rounds of a round's CPU per call."""
        return statistics.median(s / n for s, n in self.cpu_s) * 1000


@dataclass
class Replays:
    """One kind's replays: CPU seconds of each round and its sagas, and the history's size."""

    cpu_s: list[tuple[float, int]] = field(default_factory=list)
    events: int = 0
    history_bytes: int = 0

    def cpu_ms_a_saga(self) -> float:
        return statistics.median(s / n for s, n in self.cpu_s) * 1000


@contextlib.contextmanager
def gc_passes(into: list[int]) -> Any:
    """Count the collector's passes per generation into ``into`` while the body runs."""

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            into[info["generation"]] += 1

    gc.callbacks.append(seen)
    try:
        yield
    finally:
        gc.callbacks.remove(seen)


class ActivityRig:
    """Each kind's activities as its worker builds them, and an environment to run them in."""

    def __init__(self, activities: SagaActivities, steps: floor.Steps) -> None:
        self.activities = activities
        self.steps = steps
        tool = activities.state.tools.get(TOOLS[0].name).tool
        # scheduled as the saga schedules a call of the tool (so the first call may open the
        # journal in the same activity)
        self.env = ActivityEnvironment()
        self.env.info = dataclasses.replace(
            self.env.info,
            heartbeat_timeout=tool.options.heartbeat_timeout,
            start_to_close_timeout=tool.options.timeout + OUTAGE_ALLOWANCE,
            task_queue="bench-own-cost",
        )

    async def saga(self, kind: str, saga_id: str, wall_s: list[float]) -> None:
        """One saga's three calls of ``kind``, each call's wall time added to ``wall_s``."""
        if kind == FLOOR:
            for n in range(1, STEPS + 1):
                began = time.perf_counter()
                await self.env.run(self.steps.step, saga_id, n, True, False)
                wall_s.append(time.perf_counter() - began)
            return
        steps = saga_spec(fail_last=False).steps
        opening = SagaOpen(
            saga_id=saga_id, workflow_id=saga_id, first_run_id=str(uuid4()), steps=steps
        )
        prev_hash = GENESIS_HASH
        for n, step in enumerate(steps, start=1):
            request = CallRequest(
                saga_id=saga_id,
                seq=2 * n - 1,
                prev_hash=prev_hash,
                tool_name=step.tool,
                args=step.args,
                opening=opening if n == 1 else None,
                seal_as=SagaState.COMPLETED if n == STEPS else None,
            )
            call: Callable[[CallRequest], Awaitable[CallOutcome]] = (
                self.activities.open_and_call if n == 1 else self.activities.call_tool
            )
            began = time.perf_counter()
            outcome = await self.env.run(call, request)
            wall_s.append(time.perf_counter() - began)
            if outcome.status is not CallStatus.EXECUTED:
                raise RuntimeError(f"{saga_id} call {n} ended {outcome.status}")
            prev_hash = outcome.rows[-1].hash


async def activity_rounds(rig: ActivityRig, args: argparse.Namespace) -> dict[str, Calls]:
    """Each kind's sagas, ``args.sagas`` a round, the kinds alternating round by round."""
    done = {kind: Calls() for kind in KINDS}
    for kind in KINDS:  # warm up: connections, caches, prepared statements
        for _ in range(10):
            await rig.saga(kind, f"bench-own-warm-{uuid4().hex[:12]}", [])
    for r in range(args.rounds):
        for kind in KINDS if r % 2 == 0 else reversed(KINDS):
            calls = done[kind]
            ids = [f"bench-own-{kind}-{uuid4().hex[:12]}" for _ in range(args.sagas)]
            began = time.process_time()
            with gc_passes(calls.gc_passes):
                for saga_id in ids:
                    await rig.saga(kind, saga_id, calls.wall_s)
            calls.cpu_s.append((time.process_time() - began, len(ids) * STEPS))
            calls.sagas += ids
    return done


@contextlib.asynccontextmanager
async def activity_rig(stack: BenchStack, anchors: Anchors) -> AsyncIterator[ActivityRig]:
    """Sagacity's activities on a journal pool of their own, the floor's on another."""
    settings = stack.settings
    saga_pool = await open_pool(
        stack.database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
    )
    journal = JournalStore(saga_pool)
    floor_pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
        stack.database_url,
        min_size=settings.pool_min_size,
        max_size=settings.pool_max_size,
        kwargs={"autocommit": True},
        open=False,
    )
    await floor_pool.open(wait=True)
    try:
        async with floor_pool.connection() as conn:
            await conn.execute(floor.TABLE)
        activities = SagaActivities(
            journal,
            ApprovalStore(saga_pool),
            ToolRegistry(TOOLS),
            checkpoints=anchors.checkpoints(),
            keyring=anchors.keyring(),
        )
        yield ActivityRig(activities, floor.Steps(floor_pool))
    finally:
        await floor_pool.close()
        await journal.close()
        await saga_pool.close()


async def written(rig: ActivityRig, anchors: Anchors, done: dict[str, Calls]) -> dict[str, Any]:
    """Per call of each kind: rows written, checkpoints signed, checkpoint files created."""
    floor_calls, saga_calls = done[FLOOR], done[SAGACITY]
    saga_rows = 0
    for saga_id in saga_calls.sagas:
        saga_rows += len(await rig.activities.state.journal.read(saga_id))
    files = [anchors.checkpoint_dir / log_name(s) for s in saga_calls.sagas]
    signed = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files if f.exists())
    return {
        FLOOR: (await rig.steps.rows(floor_calls.sagas) / floor_calls.calls, 0.0, 0.0),
        SAGACITY: (
            saga_rows / saga_calls.calls,
            signed / saga_calls.calls,
            sum(f.exists() for f in files) / saga_calls.calls,
        ),
    }


async def record(stack: BenchStack, anchors: Anchors) -> dict[str, WorkflowHistory]:
    """One saga of each kind run to its end (all steps succeed): its history."""
    settings = stack.settings
    address, namespace = stack.temporal_address, stack.temporal_namespace
    async with contextlib.AsyncExitStack() as opened:
        url = await opened.enter_async_context(witness_process(anchors, stack.database_url))
        plugin, _ = await opened.enter_async_context(
            sagacity_plugin(settings, stack.database_url, anchors, [anchors.witness(url)])
        )
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            stack.database_url, min_size=1, max_size=4, kwargs={"autocommit": True}, open=False
        )
        await pool.open(wait=True)
        opened.push_async_callback(pool.close)
        async with pool.connection() as conn:
            await conn.execute(floor.TABLE)
        saga_client = await Client.connect(address, namespace=namespace, plugins=[plugin])
        client = await Client.connect(address, namespace=namespace)
        await register(client)
        steps = floor.Steps(pool)
        queues = {False: f"bench-own-{uuid4().hex[:8]}"}
        await opened.enter_async_context(
            Worker(
                client,
                task_queue=queues[False],
                workflows=[FloorThreeSteps],
                activities=[steps.step, steps.undo],
                workflow_runner=UnsandboxedWorkflowRunner(),
            )
        )
        saga_queue = f"bench-own-sagacity-{uuid4().hex[:8]}"
        async with (
            sagacity_worker(saga_client, saga_queue, settings),
            CpuMeter.open(stack.database_url) as meter,
        ):
            rig = floor.FloorRig(
                Rig({SAGACITY: saga_client}, {SAGACITY: saga_queue}, meter), client, queues
            )
            return {
                kind: await rig.client_of(kind)
                .get_workflow_handle(await floor.one(rig, kind))
                .fetch_history()
                for kind in KINDS
            }


async def replay_rounds(
    histories: dict[str, WorkflowHistory], anchors: Anchors, args: argparse.Namespace
) -> dict[str, Replays]:
    """Each kind's history replayed ``args.replays`` times a round, the kinds alternating."""
    replayers = {
        FLOOR: Replayer(workflows=[FloorThreeSteps], workflow_runner=UnsandboxedWorkflowRunner()),
        # as a worker of the plugin decodes it: its converter, with the run's codec
        SAGACITY: Replayer(
            workflows=[StepsWorkflow], plugins=[SagacityPlugin(codec=anchors.codec)]
        ),
    }
    done = {
        kind: Replays(events=len(h.events), history_bytes=sum(e.ByteSize() for e in h.events))
        for kind, h in histories.items()
    }

    async def times(history: WorkflowHistory, n: int) -> AsyncIterator[WorkflowHistory]:
        for _ in range(n):
            yield history

    for kind in KINDS:  # warm up
        await replayers[kind].replay_workflows(times(histories[kind], 5))
    for r in range(args.rounds):
        for kind in KINDS if r % 2 == 0 else reversed(KINDS):
            began = time.process_time()
            await replayers[kind].replay_workflows(times(histories[kind], args.replays))
            done[kind].cpu_s.append((time.process_time() - began, args.replays))
    return done


def report(
    calls: dict[str, Calls],
    rows: dict[str, Any],
    replays: dict[str, Replays],
    args: argparse.Namespace,
    stack: BenchStack,
) -> None:
    print("\n# Sagacity's own cost: its activities run alone, its workflow replayed")
    print(f"machine: {machine()}")
    print(f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin} (to record)")
    print(
        f"{args.rounds} alternating rounds per kind: {args.sagas} sagas of {STEPS} calls, and "
        f"{args.replays} replays of one saga\n"
    )
    print("The activity path, per call (CPU: the median over rounds of a round's CPU per call):\n")
    print(table(
        ["kind", "calls", "CPU ms a call", "wall p50 ms", "wall p90 ms", "rows a call",
         "checkpoints signed a call", "checkpoint files created a call",
         "GC passes per 1000 calls (generation 0 / 1 / 2)"],
        [[kind, c.calls, c.cpu_ms_a_call(), percentile(c.wall_s, 50) * 1000,
          percentile(c.wall_s, 90) * 1000, *rows[kind],
          " / ".join(f"{p * 1000 / c.calls:.1f}" for p in c.gc_passes)]
         for kind, c in calls.items()],
    ))  # fmt: skip
    call_diff = calls[SAGACITY].cpu_ms_a_call() - calls[FLOOR].cpu_ms_a_call()
    print(
        f"\nSagacity - floor: {call_diff:+.3f} ms of CPU a call ({call_diff * STEPS:+.2f} a saga)"
    )
    print("\nThe workflow side, per saga replayed (the median over rounds):\n")
    print(table(
        ["kind", "CPU ms a saga", "history events", "history bytes"],
        [[kind, r.cpu_ms_a_saga(), r.events, r.history_bytes] for kind, r in replays.items()],
    ))  # fmt: skip
    replay_diff = replays[SAGACITY].cpu_ms_a_saga() - replays[FLOOR].cpu_ms_a_saga()
    print(f"\nSagacity - floor: {replay_diff:+.3f} ms of CPU a saga")
    print(
        f"\nIn all, Sagacity's own code: {call_diff * STEPS + replay_diff:+.2f} ms of worker CPU "
        "a saga over the floor's"
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.own_cost", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--rounds", type=positive, default=6, help="rounds per kind (6)")
    parser.add_argument("--sagas", type=positive, default=100, help="sagas a round (100)")
    parser.add_argument(
        "--replays", type=positive, default=300, help="replays of one saga a round (300)"
    )
    return parser.parse_args(argv)


async def main() -> int:
    args = parse()
    async with bench_stack() as stack:
        with tempfile.TemporaryDirectory(prefix="sagacity-anchors-") as folder:
            anchors = Anchors.create(Path(folder))
            async with activity_rig(stack, anchors) as rig:
                calls = await activity_rounds(rig, args)
                rows = await written(rig, anchors, calls)
            replays = await replay_rounds(await record(stack, anchors), anchors, args)
        report(calls, rows, replays, args, stack)
    return 0


if __name__ == "__main__":
    run(main)
