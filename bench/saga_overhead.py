"""Sagacity's cost per saga and per tool call, against plain Temporal running the same activities.

Both sides run three trivial steps (``bench.overhead_workload``) on one worker, one server and one
task queue, in alternating rounds: Sagacity through the generic ``sagacity.Steps`` workflow, whose
every call writes INTENT and its outcome to the journal; the baseline as a plain workflow of plain
activities, each on its own client and worker. Sagacity runs as a new user's worker does: the
head each journal activity leaves signed into a checkpoint directory (the end sealed), the
transparency log's sequencer integrating rows beside the worker, every payload encrypted by the
codec, decisions checked against a keyring (``--bare``: the journal alone). Plain Temporal runs
as it comes: the default converter, no codec. The generic workflow runs
outside the workflow sandbox, as it ships; ``--sandboxed`` runs it inside, as a workflow of your
own that uses ``Saga`` runs by default. Reported:

* throughput, ``--sagas`` sagas per round with ``--concurrency`` in flight (target: Sagacity at
  0.85x the baseline or better), with the last step succeeding and with it failing (compensation);
* latency added per tool call: end-to-end latencies of sagas run one at a time, less the
  baseline's, over the three calls (p50 and p99), and the same under load;
* the compensation path: from the FAILED row to the last COMPENSATED row (journal timestamps),
  against the baseline's failed activity to its last undo (history timestamps);
* where the time goes: per-saga history size, workflow tasks, payload bytes, activity times.

Run from the repository root: ``python -m bench.saga_overhead`` (embedded Postgres and in-memory
Temporal; set ``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` to measure your own servers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from temporalio.api.enums.v1 import EventType
from temporalio.api.history.v1 import HistoryEvent
from temporalio.client import Client, WorkflowHistory

from bench._support import (
    CPU_ACCOUNTS,
    BenchStack,
    CpuMeter,
    bench_stack,
    machine,
    percentile,
    positive,
    run,
    table,
)
from bench.plain_workflow import STEPS
from bench.sides import (
    PLAIN,
    SAGACITY,
    Anchors,
    Rig,
    execute,
    plain_worker,
    sagacity_plugin,
    sagacity_worker,
    task_queues,
    witness_process,
)
from sagacity.journal import Phase
from sagacity.store import JournalStore

TARGET_RATIO = 0.85


@dataclass
class Totals:
    """Sagas of one kind: together (wall and CPU time) and each (latency, workflow id)."""

    sagas: int = 0
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CPU_ACCOUNTS, 0.0))
    latencies_s: list[float] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)

    def add(self, batch: Totals) -> None:
        self.sagas += batch.sagas
        self.wall_s += batch.wall_s
        self.cpu_s = {k: self.cpu_s[k] + batch.cpu_s[k] for k in CPU_ACCOUNTS}
        self.latencies_s += batch.latencies_s
        self.ids += batch.ids

    @property
    def per_s(self) -> float:
        return self.sagas / self.wall_s if self.wall_s else 0.0


async def run_batch(rig: Rig, kind: str, n: int, concurrency: int, *, fail_last: bool) -> Totals:
    """Run ``n`` sagas of ``kind``, ``concurrency`` at a time."""
    batch = Totals(sagas=n)
    gate = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with gate:
            began = time.perf_counter()
            wid = await execute(rig, kind, fail_last=fail_last)
            batch.latencies_s.append(time.perf_counter() - began)
            batch.ids.append(wid)

    began, cpu = time.perf_counter(), await rig.meter.reading()
    await asyncio.gather(*(one() for _ in range(n)))
    batch.wall_s = time.perf_counter() - began
    batch.cpu_s = await rig.meter.since(cpu)
    return batch


async def rounds(rig: Rig, args: argparse.Namespace, *, fail_last: bool) -> dict[str, Totals]:
    """Alternate the kinds round by round, so neither always runs on a warmer server."""
    totals = {PLAIN: Totals(), SAGACITY: Totals()}
    for r in range(args.rounds):
        order = (PLAIN, SAGACITY) if r % 2 == 0 else (SAGACITY, PLAIN)
        for kind in order:
            totals[kind].add(
                await run_batch(rig, kind, args.sagas, args.concurrency, fail_last=fail_last)
            )
    return totals


async def one_at_a_time(rig: Rig, n: int) -> dict[str, Totals]:
    """Latency without queueing: ``n`` sagas of each kind, alternating, one in flight."""
    totals = {PLAIN: Totals(), SAGACITY: Totals()}
    for i in range(n):
        for kind in (PLAIN, SAGACITY) if i % 2 == 0 else (SAGACITY, PLAIN):
            totals[kind].add(await run_batch(rig, kind, 1, 1, fail_last=False))
    return totals


# -- what the histories say ------------------------------------------------------------------------


@dataclass
class Shape:
    """What one workflow run cost the server, read from its history."""

    events: int
    workflow_tasks: int
    activities: int
    local_activities: int
    #: workflow input and result, activity inputs, results and failures
    payload_bytes: int
    #: local activity results (kept in marker events)
    marker_bytes: int
    #: per activity: scheduled -> started, started -> closed (seconds)
    queued_s: list[float]
    ran_s: list[float]
    #: first event to last
    duration_s: float
    #: waiting to be handed to the worker: workflow and activity tasks, scheduled -> started
    dispatch_s: float

    @property
    def own_s(self) -> float:
        """The run's time without dispatch waits: what the worker and the server spent on it."""
        return self.duration_s - self.dispatch_s


def shape(history: WorkflowHistory) -> Shape:
    scheduled: dict[int, float] = {}
    started: dict[int, float] = {}
    queued: list[float] = []
    ran: list[float] = []
    payload = markers = 0
    dispatch = 0.0
    counts = {"wft": 0, "act": 0, "local": 0}
    for event in history.events:
        at = _at(event)
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
            scheduled[event.event_id] = at
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            dispatch += (
                at - scheduled[event.workflow_task_started_event_attributes.scheduled_event_id]
            )
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
            payload += event.workflow_execution_started_event_attributes.input.ByteSize()
        elif kind == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
            payload += event.workflow_execution_completed_event_attributes.result.ByteSize()
        elif kind == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED:
            counts["wft"] += 1
        elif kind == EventType.EVENT_TYPE_MARKER_RECORDED:
            counts["local"] += 1
            markers += sum(
                p.ByteSize() for p in event.marker_recorded_event_attributes.details.values()
            )
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            counts["act"] += 1
            scheduled[event.event_id] = at
            payload += event.activity_task_scheduled_event_attributes.input.ByteSize()
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED:
            attrs = event.activity_task_started_event_attributes
            started[attrs.scheduled_event_id] = at
            queued.append(at - scheduled[attrs.scheduled_event_id])
            dispatch += queued[-1]
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attrs_c = event.activity_task_completed_event_attributes
            ran.append(at - started[attrs_c.scheduled_event_id])
            payload += attrs_c.result.ByteSize()
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            attrs_f = event.activity_task_failed_event_attributes
            ran.append(at - started[attrs_f.scheduled_event_id])
            payload += attrs_f.failure.ByteSize()
    return Shape(
        len(history.events),
        counts["wft"],
        counts["act"],
        counts["local"],
        payload,
        markers,
        queued,
        ran,
        duration_s=_at(history.events[-1]) - _at(history.events[0]),
        dispatch_s=dispatch,
    )


def _at(event: HistoryEvent) -> float:
    return event.event_time.ToDatetime().timestamp()


def failure_to_last_undo_s(history: WorkflowHistory) -> float:
    """Baseline compensation path: the failed activity's event to the last completed activity's."""
    failed = last_done = None
    for event in history.events:
        at = _at(event)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            failed = at
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            last_done = at
    if failed is None or last_done is None or last_done < failed:
        raise RuntimeError(f"{history.workflow_id}: no failed activity followed by an undo")
    return last_done - failed


async def failure_to_last_compensated_s(journal: JournalStore, saga_id: str) -> float:
    """Sagacity compensation path: the FAILED row's timestamp to the last COMPENSATED row's."""
    rows = await journal.read(saga_id)
    failed = next(r.timestamp for r in rows if r.phase is Phase.FAILED)
    last = max(r.timestamp for r in rows if r.phase is Phase.COMPENSATED)
    return (last - failed).total_seconds()


async def histories(client: Client, ids: Sequence[str]) -> list[WorkflowHistory]:
    return [await client.get_workflow_handle(wid).fetch_history() for wid in ids]


# -- report ----------------------------------------------------------------------------------------


def ms(seconds: float) -> float:
    return seconds * 1000


def throughput_rows(title: str, totals: dict[str, Totals]) -> list[list[object]]:
    saga, plain = totals[SAGACITY], totals[PLAIN]
    ratio = saga.per_s / plain.per_s if plain.per_s else 0.0
    verdict = "meets" if ratio >= TARGET_RATIO else "misses"
    return [
        [title, kind, t.sagas, t.per_s, ms(percentile(t.latencies_s, 50)),
         ms(percentile(t.latencies_s, 99)), note]
        for kind, t, note in (
            (PLAIN, plain, ""),
            (SAGACITY, saga, f"{ratio:.2f}x ({verdict} {TARGET_RATIO}x)"),
        )
    ]  # fmt: skip


def cpu_ratio(totals: dict[str, Totals]) -> float:
    """Plain CPU per saga over Sagacity's, summed over the accounts measured on this machine.

    On a machine whose CPUs are the bottleneck (the case on a small box running everything)
    this predicts the throughput ratio, and unlike wall time it is not moved by other load.
    """

    def per_saga(t: Totals) -> float:
        return sum(v for v in t.cpu_s.values() if not math.isnan(v)) / t.sagas

    return per_saga(totals[PLAIN]) / per_saga(totals[SAGACITY])


def latency_row(label: str, plain: list[float], saga: list[float]) -> list[object]:
    """p50 and p99 of each kind's saga latencies, and what Sagacity adds per call at each."""
    row: list[object] = [label]
    for q in (50, 99):
        p, s = percentile(plain, q), percentile(saga, q)
        row += [ms(p), ms(s), ms(s - p) / STEPS]
    return row


def shape_rows(kind: str, shapes: list[Shape]) -> list[object]:
    def median(values: list[float]) -> float:
        return percentile(values, 50)

    return [
        kind,
        median([s.events for s in shapes]),
        median([s.workflow_tasks for s in shapes]),
        median([s.activities for s in shapes]),
        median([s.local_activities for s in shapes]),
        median([s.payload_bytes for s in shapes]),
        median([s.marker_bytes for s in shapes]),
        ms(median([s.dispatch_s for s in shapes])),
        ms(median([q for s in shapes for q in s.queued_s])),
        ms(median([r for s in shapes for r in s.ran_s])),
    ]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.saga_overhead", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sagas", type=positive, default=100, help="sagas per kind per round (100)"
    )
    parser.add_argument("--concurrency", type=positive, default=100, help="sagas in flight (100)")
    parser.add_argument("--rounds", type=positive, default=5, help="rounds per kind (5)")
    parser.add_argument(
        "--sequential", type=positive, default=30, help="one-at-a-time sagas per kind (30)"
    )
    parser.add_argument(
        "--bare", action="store_true", help="no checkpoints and no transparency log"
    )
    parser.add_argument(
        "--sandboxed",
        action="store_true",
        help="run Sagacity's generic workflow in the workflow sandbox, as your own would be",
    )
    return parser.parse_args(argv)


async def measure(stack: BenchStack, args: argparse.Namespace, anchors: Anchors | None) -> None:
    settings = stack.settings
    async with contextlib.AsyncExitStack() as opened:
        # the sequencer a worker runs beside its tool calls asks a witness (a `sagacity
        # witness` process of its own, as the dev stack's trust file names one)
        witnesses = []
        if anchors is not None:
            url = await opened.enter_async_context(witness_process(anchors, stack.database_url))
            witnesses.append(anchors.witness(url))
        # as a new user's worker runs: checkpoints, the payload codec, a decision keyring
        plugin, journal = await opened.enter_async_context(
            sagacity_plugin(settings, stack.database_url, anchors, witnesses)
        )
        address, namespace = stack.temporal_address, stack.temporal_namespace
        # plain Temporal as it comes: its own client (no Sagacity converter, no codec) and worker
        clients = {
            SAGACITY: await Client.connect(address, namespace=namespace, plugins=[plugin]),
            PLAIN: await Client.connect(address, namespace=namespace),
        }
        queues = task_queues()
        workers = [
            sagacity_worker(
                clients[SAGACITY], queues[SAGACITY], settings, sandboxed=args.sandboxed
            ),
            plain_worker(clients[PLAIN], queues[PLAIN], settings),
        ]
        async with workers[0], workers[1], CpuMeter.open(stack.database_url) as meter:
            rig = Rig(clients, queues, meter)
            for kind in (PLAIN, SAGACITY):  # warm up: sandbox, connections, caches
                await run_batch(rig, kind, 10, 10, fail_last=False)
            ok = await rounds(rig, args, fail_last=False)
            failing = await rounds(rig, args, fail_last=True)
            alone = await one_at_a_time(rig, args.sequential)
            comp_saga = [
                await failure_to_last_compensated_s(journal, sid) for sid in failing[SAGACITY].ids
            ]
            comp_plain = [
                failure_to_last_undo_s(h)
                for h in await histories(clients[PLAIN], failing[PLAIN].ids)
            ]
            shapes = {
                kind: [shape(h) for h in await histories(clients[kind], alone[kind].ids)]
                for kind in (PLAIN, SAGACITY)
            }

    print(f"\n# Sagacity vs plain Temporal: {STEPS} trivial steps per saga")
    print(f"machine: {machine()}")
    print(
        "Sagacity's anchors: none (--bare)"
        if anchors is None
        else "Sagacity's anchors: a signed checkpoint per journal activity, the end sealed, the "
        "transparency log's sequencer every 10 s, each tree head cosigned by a witness process; "
        "payloads encrypted (AES-GCM codec); decisions checked against a keyring"
    )
    print(
        "Sagacity's generic workflow: "
        + ("in the workflow sandbox (--sandboxed)" if args.sandboxed else "outside the sandbox")
        + "; plain's: in the sandbox (Temporal's default)"
    )
    print(f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin}")
    print(
        f"{args.rounds} alternating rounds of {args.sagas} sagas per kind, {args.concurrency} in "
        f"flight; journal pool {settings.pool_min_size}-{settings.pool_max_size} connections; "
        f"worker max {settings.max_concurrent_activities} concurrent activities\n"
    )
    print(table(
        ["path", "kind", "sagas", "sagas/s", "p50 ms", "p99 ms", "Sagacity / plain"],
        [*throughput_rows("all steps succeed", ok), *throughput_rows("last step fails", failing)],
    ))  # fmt: skip
    print("\nCPU ms per saga (worker and client share this process; the Postgres backends")
    print("serving this run's database; NaN: the server is not on this machine):\n")
    print(table(
        ["path", "kind", *CPU_ACCOUNTS, "plain / Sagacity"],
        [[title, kind, *(ms(t.cpu_s[k] / t.sagas) for k in CPU_ACCOUNTS),
          f"{cpu_ratio(totals):.2f}x" if kind == SAGACITY else ""]
         for title, totals in (("all steps succeed", ok), ("last step fails", failing))
         for kind, t in totals.items()],
    ))  # fmt: skip
    print(f"\nLatency per saga, and added per tool call (the difference / {STEPS}):\n")
    print(table(
        ["measured", "plain p50 ms", "Sagacity p50 ms", "added per call p50 ms",
         "plain p99 ms", "Sagacity p99 ms", "added per call p99 ms"],
        [
            latency_row(f"one saga at a time ({args.sequential} per kind), client",
                        alone[PLAIN].latencies_s, alone[SAGACITY].latencies_s),
            latency_row("the same, from history, task dispatch waits left out",
                        *([s.own_s for s in shapes[k]] for k in (PLAIN, SAGACITY))),
            latency_row(f"under load ({args.concurrency} in flight, queueing included)",
                        ok[PLAIN].latencies_s, ok[SAGACITY].latencies_s),
        ],
    ))  # fmt: skip
    print("\nCompensation path, last step failing (under load):\n")
    print(table(
        ["kind", "measured from", "p50 ms", "p99 ms"],
        [
            [SAGACITY, "FAILED row -> last COMPENSATED row",
             ms(percentile(comp_saga, 50)), ms(percentile(comp_saga, 99))],
            [PLAIN, "failed activity -> last undo completed",
             ms(percentile(comp_plain, 50)), ms(percentile(comp_plain, 99))],
        ],
    ))  # fmt: skip
    print("\nWhere the time goes (medians over the one-at-a-time sagas):\n")
    print(table(
        ["kind", "history events", "workflow tasks", "activities", "local activities",
         "payload bytes", "marker bytes", "dispatch waits ms/saga", "activity queued ms",
         "activity ran ms"],
        [shape_rows(kind, shapes[kind]) for kind in (PLAIN, SAGACITY)],
    ))  # fmt: skip


async def main() -> int:
    args = parse()
    async with bench_stack() as stack:
        if args.bare:
            await measure(stack, args, None)
        else:
            with tempfile.TemporaryDirectory(prefix="sagacity-anchors-") as anchors:
                await measure(stack, args, Anchors.create(Path(anchors)))
    return 0


if __name__ == "__main__":
    run(main)
