"""Sagacity's own cost per call and per saga, measured away from a loaded server.

``bench.saga_overhead`` and ``bench.floor`` run whole sagas through one Temporal server under
load, and their runs move by ±0.1: a change that saves a few percent of a saga's CPU does not
show there. This bench measures the worker's share alone, against ``bench.floor``'s ``floor``
kind (the journal's two durable commits a call, without Sagacity's code), the kinds alternating
round by round in one run:

* the activity path: a three-step saga's calls run as activities in Temporal's
  ``ActivityEnvironment`` (no server) against one Postgres. Sagacity's are built as
  ``SagacityPlugin`` builds them for a worker of your own (``SagaActivities``: signed
  checkpoints, the default redaction, a keyring; Sagacity's side in ``bench.sides``): the first
  call claims the journal and writes INTENT in one statement (``open_and_call``), each call
  writes its outcome, the last seals the end. The floor's step commits a row before its work and
  one after. Per call: CPU, wall time, rows written and checkpoints signed; checkpoint files a
  saga; the garbage collector's passes.
* the workflow side: one recorded saga of each kind (all steps succeed) replayed by Temporal's
  ``Replayer``, Sagacity's with its converter and codec: CPU per saga replayed (the workflow
  code, the payload conversion and the SDK core's history processing, which a live worker runs
  for the saga's workflow tasks), with the history's events and bytes.
* the transparency log's sequencer, which a worker runs beside its tool calls: after each of
  Sagacity's activity rounds, one pass integrating that round's rows (their checkpoints read
  and checked, their chains walked, the leaves appended and the head signed). CPU per saga;
  the floor has none.

The difference is taken round by round (the kinds alternate within each round), and printed as
the median with the least and the most. Left out on both sides: the Temporal server's and
Postgres' own CPU and the RPCs to them. Left out on Sagacity's: the activities' payload
conversion and codec (the environment hands them objects), the witnesses the sequencer asks
to cosign each head (once a pass, whatever its size), and what ``sagacity worker`` adds around
the plugin (its log context, metrics and a log line a call). ``bench.saga_overhead`` and
``bench.floor`` measure all of these.

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
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from uuid import uuid4

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
from sagacity.evidence.keys import load_private_key
from sagacity.evidence.tlog import Sequencer
from sagacity.journal import GENESIS_HASH
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.store.tlog import TlogStore
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
class Rounds:
    """One kind's CPU seconds per unit (a call, a saga replayed) in each round, in round order:
    the kinds ran the same rounds, so round ``r`` of one pairs with round ``r`` of another."""

    per_unit_s: list[float] = field(default_factory=list)

    def ms(self) -> float:
        """The median over rounds, in ms."""
        return statistics.median(self.per_unit_s) * 1000

    def spread(self) -> tuple[float, float, float]:
        """Over rounds (ms): the median, the least, the most."""
        each = [s * 1000 for s in self.per_unit_s]
        return statistics.median(each), min(each), max(each)

    def over(self, base: Rounds) -> tuple[float, float, float]:
        """This kind's CPU less ``base``'s, round by round (ms): the median, the least, the most."""
        pairs = zip(self.per_unit_s, base.per_unit_s, strict=True)
        return Rounds([a - b for a, b in pairs]).spread()


@dataclass
class Calls:
    """One kind's calls over the activity rounds."""

    sagas: list[str] = field(default_factory=list)
    cpu: Rounds = field(default_factory=Rounds)
    wall_s: list[float] = field(default_factory=list)
    #: the collector's passes per generation
    gc_passes: list[int] = field(default_factory=lambda: [0, 0, 0])
    #: the sequencer's pass after each round, per saga (Sagacity's only)
    sequencer: Rounds = field(default_factory=Rounds)
    #: rows the sequencer appended in those passes
    logged: int = 0

    @property
    def calls(self) -> int:
        return len(self.wall_s)


@dataclass(frozen=True)
class Written:
    """What one kind's calls left, per call: rows, checkpoints signed; and checkpoint files a
    saga."""

    rows: float
    signed: float
    files: float


@dataclass
class Replays:
    """One kind's replays: CPU per saga replayed in each round, and the history's size."""

    cpu: Rounds = field(default_factory=Rounds)
    events: int = 0
    history_bytes: int = 0


@contextlib.contextmanager
def gc_passes(into: list[int]) -> Iterator[None]:
    """Count the collector's passes per generation into ``into`` while the body runs (collected
    first: what an earlier round left is not booked to this one)."""

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "stop":
            into[info["generation"]] += 1

    gc.collect()
    gc.callbacks.append(seen)
    try:
        yield
    finally:
        gc.callbacks.remove(seen)


class ActivityRig:
    """Each kind's activities as its worker builds them, and an environment to run them in."""

    def __init__(
        self, activities: SagaActivities, steps: floor.Steps, sequencer: Sequencer
    ) -> None:
        self.activities = activities
        self.steps = steps
        self.sequencer = sequencer
        self.spec = saga_spec(fail_last=False).steps
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
        # as the plugin marks a namespace whose search attributes are registered (the open's
        # answer then says the saga shows its state in them)
        activities.visible_in.add(self.env.info.namespace)

    async def saga(self, kind: str, saga_id: str, wall_s: list[float]) -> None:
        """One saga's three calls of ``kind``, each call's wall time added to ``wall_s``."""
        if kind == FLOOR:
            for n in range(1, STEPS + 1):
                began = time.perf_counter()
                await self.env.run(self.steps.step, saga_id, n, True, False)
                wall_s.append(time.perf_counter() - began)
            return
        opening = SagaOpen(
            saga_id=saga_id, workflow_id=saga_id, first_run_id=str(uuid4()), steps=self.spec
        )
        prev_hash = GENESIS_HASH
        for n, step in enumerate(self.spec, start=1):
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
    # a worker's sequencer checks the whole log on its first pass, then what is new
    await rig.sequencer.integrate(full_check=True)
    for r in range(args.rounds):
        for kind in KINDS if r % 2 == 0 else reversed(KINDS):
            calls = done[kind]
            ids = [f"bench-own-{kind}-{uuid4().hex[:12]}" for _ in range(args.sagas)]
            with gc_passes(calls.gc_passes):
                began = time.process_time()
                for saga_id in ids:
                    await rig.saga(kind, saga_id, calls.wall_s)
                calls.cpu.per_unit_s.append((time.process_time() - began) / (len(ids) * STEPS))
            calls.sagas += ids
            if kind == SAGACITY:
                began = time.process_time()
                calls.logged += (await rig.sequencer.integrate()).appended
                calls.sequencer.per_unit_s.append((time.process_time() - began) / len(ids))
    return done


@contextlib.asynccontextmanager
async def activity_rig(stack: BenchStack, anchors: Anchors) -> AsyncIterator[ActivityRig]:
    """Sagacity's activities on a journal pool of their own, the floor's on another."""
    settings = stack.settings
    saga_pool = await open_pool(
        stack.database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
    )
    journal = JournalStore(saga_pool)
    try:
        activities = SagaActivities(
            journal,
            ApprovalStore(saga_pool),
            ToolRegistry(TOOLS),
            checkpoints=anchors.checkpoints(),
            keyring=anchors.keyring(),
        )
        # as run_sequencer sets one up beside a worker: a small pool of its own
        log_pool = await open_pool(stack.database_url, min_size=0, max_size=3)
        sequencer = Sequencer(
            TlogStore(log_pool), anchors.checkpoint_dir, load_private_key(anchors.signing_key)
        )
        try:
            async with floor.Steps.opened(stack.database_url, settings) as steps:
                yield ActivityRig(activities, steps, sequencer)
        finally:
            await log_pool.close()
    finally:
        await journal.close()
        await saga_pool.close()


async def written(rig: ActivityRig, anchors: Anchors, done: dict[str, Calls]) -> dict[str, Written]:
    """What each kind's calls left: rows and checkpoints a call, checkpoint files a saga."""
    floor_calls, saga_calls = done[FLOOR], done[SAGACITY]
    saga_rows = 0
    for saga_id in saga_calls.sagas:
        saga_rows += len(await rig.activities.state.journal.read(saga_id))
    files = [anchors.checkpoint_dir / log_name(s) for s in saga_calls.sagas]
    signed = sum(len(f.read_text(encoding="utf-8").splitlines()) for f in files if f.exists())
    return {
        FLOOR: Written(await rig.steps.rows(floor_calls.sagas) / floor_calls.calls, 0.0, 0.0),
        SAGACITY: Written(
            saga_rows / saga_calls.calls,
            signed / saga_calls.calls,
            sum(f.exists() for f in files) / len(files),
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
        steps = await opened.enter_async_context(floor.Steps.opened(stack.database_url, settings))
        saga_client = await Client.connect(address, namespace=namespace, plugins=[plugin])
        client = await Client.connect(address, namespace=namespace)
        await register(client)
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
            gc.collect()
            began = time.process_time()
            await replayers[kind].replay_workflows(times(histories[kind], args.replays))
            done[kind].cpu.per_unit_s.append((time.process_time() - began) / args.replays)
    return done


def report(
    calls: dict[str, Calls],
    left: dict[str, Written],
    replays: dict[str, Replays],
    args: argparse.Namespace,
    stack: BenchStack,
) -> None:
    print("\n# Sagacity's own cost: its activities run alone, its workflow replayed")
    print(f"machine: {machine()}")
    print(f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin} (to record)")
    print(
        f"{args.rounds} alternating rounds per kind: {args.sagas} sagas of {STEPS} calls, and "
        f"{args.replays} replays of one saga. CPU: the median over rounds; Sagacity - floor: "
        "the median of each round's difference, the least and the most in brackets\n"
    )
    print("The activity path, per call:\n")
    print(table(
        ["kind", "calls", "CPU ms a call", "wall p50 ms", "wall p90 ms", "rows a call",
         "checkpoints signed a call", "checkpoint files a saga",
         "GC passes per 1000 calls (generation 0 / 1 / 2)"],
        [[kind, c.calls, c.cpu.ms(), percentile(c.wall_s, 50) * 1000,
          percentile(c.wall_s, 90) * 1000, left[kind].rows, left[kind].signed, left[kind].files,
          " / ".join(f"{p * 1000 / c.calls:.1f}" for p in c.gc_passes)]
         for kind, c in calls.items()],
    ))  # fmt: skip
    call = calls[SAGACITY].cpu.over(calls[FLOOR].cpu)
    print(f"\nSagacity - floor: {_spread(call)} ms of CPU a call")
    print("\nThe workflow side, per saga replayed:\n")
    print(table(
        ["kind", "CPU ms a saga", "history events", "history bytes"],
        [[kind, r.cpu.ms(), r.events, r.history_bytes] for kind, r in replays.items()],
    ))  # fmt: skip
    replay = replays[SAGACITY].cpu.over(replays[FLOOR].cpu)
    print(f"\nSagacity - floor: {_spread(replay)} ms of CPU a saga")
    saga_calls = calls[SAGACITY]
    passes = saga_calls.sequencer.spread()
    print(
        f"\nThe transparency log's sequencer, a pass after each round: {_spread(passes)} ms of "
        f"CPU a saga ({saga_calls.logged / len(saga_calls.sagas):.1f} rows logged a saga; the "
        "floor has none)"
    )
    in_all = tuple(c * STEPS + r + q for c, r, q in zip(call, replay, passes, strict=True))
    print(
        f"\nIn all, Sagacity's own code: {in_all[0]:+.2f} ms of worker CPU a saga over the "
        f"floor's (three calls, a replay and the sequencer; the medians' sum, the least and the "
        f"most summed: {in_all[1]:+.2f} to {in_all[2]:+.2f})"
    )


def _spread(diff: tuple[float, float, float]) -> str:
    return f"{diff[0]:+.3f} [{diff[1]:+.3f} to {diff[2]:+.3f}]"


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
                left = await written(rig, anchors, calls)
            replays = await replay_rounds(await record(stack, anchors), anchors, args)
        report(calls, left, replays, args, stack)
    return 0


if __name__ == "__main__":
    run(main)
