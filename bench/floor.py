"""The floor under ``bench.saga_overhead``: what a saga's guarantees cost with no Sagacity code.

A plain workflow of three trivial steps (``bench.floor_workflow``) is run as these kinds:

* ``plain``: in the workflow sandbox, Temporal's default (``bench.saga_overhead``'s baseline);
* ``plain, unsandboxed``: outside it, as Sagacity's generic workflow runs (the sandbox is no
  guarantee's, so the kinds below go without it too);
* ``journal``: each step commits a row (its input, and its result or error) before its work and
  one after it, each its own durable single-row insert (INTENT before the tool runs, the outcome
  before the activity completes; a retry finds its row and goes on), and each undo one after
  its own (COMPENSATED);
* ``floor``: the journal, a 30 s heartbeat timeout on each step (a dead worker's call is tried
  again within it), and the end state shown in the ``SagacityState`` search attribute (Temporal's
  own list answers "which sagas compensated").

Tamper evidence (the rows' hashes, signed checkpoints, the transparency log) is left on
Sagacity's side of the comparison: Sagacity runs in the same rounds as ``bench.saga_overhead``
runs it (a new user's worker: checkpoints, the sequencer and a witness, the codec, a keyring),
and again with its spec's engine version set (no patch marker, once a fleet allows it). All
kinds alternate round by round on one Temporal server and one Postgres. Reported against
plain's: throughput and CPU per saga with all steps succeeding and with the last failing, the
rows each plain kind journaled a saga, and the compensation path (every kind's read the same
way from its history: the failing call's activity closed to the last undo's completed); then,
from sagas run one at a time, the latency each kind adds per call (from history, task dispatch
waits left out), and what a durable commit costs on its own. The ``floor`` row is the most any
code keeping those guarantees reaches on this machine; Sagacity's distance from it is what its
own code costs.

Run from the repository root: ``python -m bench.floor`` (embedded Postgres and in-memory
Temporal; set ``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` to measure your own servers).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import math
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from temporalio import activity
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHistory
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import UnsandboxedWorkflowRunner, Worker
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

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
from bench.floor_workflow import NAME, STEP, STEPS, UNDO, Adds, FloorThreeSteps
from bench.saga_overhead import Shape, Totals, histories, shape
from bench.sides import (
    SAGACITY,
    Anchors,
    Rig,
    execute,
    sagacity_plugin,
    sagacity_worker,
    witness_process,
)
from sagacity.settings import Settings
from sagacity.temporal.names import COMPENSATE
from sagacity.temporal.visibility import register
from sagacity.workflow import ENGINE_VERSION


@dataclass(frozen=True)
class FloorKind:
    """A plain kind: what it adds to the three steps, and whether its workflow runs in the
    sandbox (Temporal's default, as bench.saga_overhead's baseline runs) or outside it (as
    Sagacity's generic workflow runs: the sandbox is no guarantee's, so the floor goes without)."""

    adds: Adds
    sandboxed: bool = False


#: the kinds, in the order they are reported: plain first, Sagacity last
FLOOR_KINDS: dict[str, FloorKind] = {
    "plain": FloorKind(Adds(), sandboxed=True),
    "plain, unsandboxed": FloorKind(Adds()),
    "journal": FloorKind(Adds(journal=True)),
    "floor": FloorKind(Adds(journal=True, heartbeat_timeout=True, end_state=True)),
}
#: Sagacity with its spec's engine version set (no patch marker: docs/versioning.md)
PINNED = "sagacity, engine version"
KINDS = (*FLOOR_KINDS, SAGACITY, PINNED)
SUCCEEDING, FAILING = "all steps succeed", "last step fails"

_TABLE = """
CREATE TABLE IF NOT EXISTS floor_rows (
    workflow_id text NOT NULL,
    seq integer NOT NULL,
    phase text NOT NULL,
    input text NOT NULL,
    payload text NOT NULL,
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, seq)
)
"""
#: a retried step finds its row there and goes on, as a journal's idempotent append does
_INSERT = (
    "INSERT INTO floor_rows (workflow_id, seq, phase, input, payload) "
    "VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING"
)
_ROWS = "SELECT count(*) FROM floor_rows WHERE workflow_id = ANY(%s)"


class Steps:
    """The floor's step and undo: the plain ones' trivial work, journaled when asked."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        self.pool = pool

    @classmethod
    @contextlib.asynccontextmanager
    async def opened(cls, database_url: str, settings: Settings) -> AsyncIterator[Steps]:
        """Steps on a pool of their own (autocommit, sized as a worker's journal pool), their
        table made."""
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            database_url,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            kwargs={"autocommit": True},
            open=False,
        )
        await pool.open(wait=True)
        try:
            async with pool.connection() as conn:
                await conn.execute(_TABLE)
            yield cls(pool)
        finally:
            await pool.close()

    @activity.defn(name=STEP)
    async def step(self, workflow_id: str, n: int, journal: bool, fail: bool) -> dict[str, int]:
        args = json.dumps({"n": n, "fail": fail})
        if journal:
            await self.commit(workflow_id, 2 * n - 1, "intent", args, "")
        if fail:
            error = f"step {n} said no"
            if journal:
                await self.commit(workflow_id, 2 * n, "failed", args, json.dumps(error))
            # BENIGN, as bench.overhead_workload's step that says no
            raise ApplicationError(
                error,
                type="StepRefused",
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )
        result = {"n": n}
        if journal:
            await self.commit(workflow_id, 2 * n, "executed", args, json.dumps(result))
        return result

    @activity.defn(name=UNDO)
    async def undo(self, workflow_id: str, n: int, journal: bool) -> None:
        if journal:
            args = json.dumps({"n": n})
            await self.commit(workflow_id, 2 * STEPS + n, "compensated", args, "")

    async def commit(self, workflow_id: str, seq: int, *row: str) -> None:
        """Commit one row (phase, input, payload) on its own: one durable single-row insert."""
        async with self.pool.connection() as conn:
            await conn.execute(_INSERT, (workflow_id, seq, *row))

    async def rows(self, workflow_ids: list[str]) -> int:
        """How many rows the sagas ``workflow_ids`` journaled."""
        async with self.pool.connection() as conn:
            found = await (await conn.execute(_ROWS, (workflow_ids,))).fetchone()
        return int(found[0]) if found else 0


def cpu_ms(t: Totals) -> dict[str, float]:
    """CPU ms per saga of ``t`` by account (NaN: that server is not on this machine)."""
    return {k: v / t.sagas * 1000 for k, v in t.cpu_s.items()}


def cpu_total_ms(t: Totals) -> float:
    """CPU ms per saga of ``t``, over the accounts measured on this machine."""
    return sum(v for v in cpu_ms(t).values() if not math.isnan(v))


@dataclass(frozen=True)
class FloorRig:
    """Sagacity's rig (bench.sides), and the plain kinds' client and task queues (one in the
    sandbox, one outside it)."""

    sagacity: Rig
    client: Client
    task_queues: dict[bool, str]

    def client_of(self, kind: str) -> Client:
        return self.sagacity.clients[SAGACITY] if kind in (SAGACITY, PINNED) else self.client


async def one(rig: FloorRig, kind: str, *, fail_last: bool = False) -> str:
    """Run one saga of ``kind`` to its end; its workflow id. Raises on a wrong outcome."""
    if kind in (SAGACITY, PINNED):
        version = ENGINE_VERSION if kind == PINNED else None
        return await execute(rig.sagacity, SAGACITY, fail_last=fail_last, engine_version=version)
    wid = f"bench-floor-{uuid4().hex[:12]}"
    floor = FLOOR_KINDS[kind]
    result = await rig.client.execute_workflow(
        NAME,
        args=[floor.adds, fail_last],
        id=wid,
        task_queue=rig.task_queues[floor.sandboxed],
        result_type=dict,
    )
    expected = "compensated" if fail_last else "completed"
    if result.get("status") != expected:
        raise RuntimeError(f"a {kind} saga ended {result}, expected {expected}")
    return wid


async def one_at_a_time(rig: FloorRig, n: int) -> dict[str, list[Shape]]:
    """``n`` sagas of each kind run alone, the kinds alternating; what each history shows."""
    ids: dict[str, list[str]] = {kind: [] for kind in KINDS}
    for i in range(n):
        for kind in KINDS if i % 2 == 0 else reversed(KINDS):
            ids[kind].append(await one(rig, kind))
    return {
        kind: [shape(h) for h in await histories(rig.client_of(kind), ids[kind])] for kind in KINDS
    }


async def batch(rig: FloorRig, kind: str, n: int, concurrency: int, *, fail_last: bool) -> Totals:
    """``n`` sagas of ``kind``, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)
    ids: list[str] = []

    async def gated() -> None:
        async with gate:
            ids.append(await one(rig, kind, fail_last=fail_last))

    meter = rig.sagacity.meter
    began, cpu = time.perf_counter(), await meter.reading()
    await asyncio.gather(*(gated() for _ in range(n)))
    wall = time.perf_counter() - began
    return Totals(sagas=n, wall_s=wall, cpu_s=await meter.since(cpu), ids=ids)


async def rounds(rig: FloorRig, args: argparse.Namespace, *, fail_last: bool) -> dict[str, Totals]:
    """Every kind once a round, the order reversed every other round."""
    totals = {kind: Totals() for kind in KINDS}
    for r in range(args.rounds):
        for kind in KINDS if r % 2 == 0 else reversed(KINDS):
            totals[kind].add(
                await batch(rig, kind, args.sagas, args.concurrency, fail_last=fail_last)
            )
    return totals


async def compensation_paths(rig: FloorRig, failing: dict[str, Totals]) -> dict[str, list[float]]:
    """Each kind's compensation path per failing saga (seconds), read the same way from every
    kind's history: the failing call's activity closed to the last undo's completed."""
    return {
        kind: [failure_to_last_undo(h) for h in await histories(rig.client_of(kind), t.ids)]
        for kind, t in failing.items()
    }


def failure_to_last_undo(history: WorkflowHistory) -> float:
    """From the close of the last call before the first undo to the last undo's completion."""
    types: dict[int, str] = {}
    failed = last_undo = None
    for event in history.events:
        kind = event.event_type
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            attrs = event.activity_task_scheduled_event_attributes
            types[event.event_id] = attrs.activity_type.name
            continue
        if kind == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            scheduled = event.activity_task_completed_event_attributes.scheduled_event_id
        elif kind == EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED:
            scheduled = event.activity_task_failed_event_attributes.scheduled_event_id
        else:
            continue
        at = event.event_time.ToDatetime().timestamp()
        if types[scheduled] in _UNDOS:
            last_undo = at
        elif last_undo is None:
            failed = at
    if failed is None or last_undo is None:
        raise RuntimeError(f"{history.workflow_id}: no call closed before an undo completed")
    return last_undo - failed


#: the activity types that undo a step: the plain kinds' and Sagacity's
_UNDOS = frozenset({UNDO, COMPENSATE})


async def commit_latency(steps: Steps, n: int) -> list[float]:
    """``n`` of the plain kinds' durable single-row commits, one after another, outside any
    activity (seconds each): what the disk and the round trip cost on their own."""
    taken = []
    for i in range(n):
        began = time.perf_counter()
        await steps.commit(f"bench-floor-commit-{uuid4().hex[:12]}", i, "intent", "{}", "")
        taken.append(time.perf_counter() - began)
    return taken


def report(measured: Measured, args: argparse.Namespace, stack: BenchStack) -> None:
    in_flight = min(args.concurrency, args.sagas)
    print("\n# The floor: what a saga's guarantees cost with no Sagacity code")
    print(f"machine: {machine()}")
    print(f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin}")
    print(
        f"{args.rounds} alternating rounds of {args.sagas} sagas per kind and path, "
        f"{in_flight} in flight, {STEPS} trivial steps each\n"
    )
    compensation = measured.compensation
    plain_path = percentile(compensation["plain"], 50)
    rows: list[list[object]] = []
    for title, totals in measured.paths.items():
        plain = totals["plain"]
        for kind in KINDS:
            t = totals[kind]
            cpu = cpu_ms(t)
            failing = title == FAILING
            path = percentile(compensation[kind], 50)
            rows.append([
                title, kind, t.sagas, measured.rows[title].get(kind, "n/a"), t.per_s,
                f"{t.per_s / plain.per_s:.2f}x", *(cpu[k] for k in CPU_ACCOUNTS),
                cpu_total_ms(t), f"{cpu_total_ms(plain) / cpu_total_ms(t):.2f}x",
                path * 1000 if failing else "", f"{path / plain_path:.2f}x" if failing else "",
            ])  # fmt: skip
    print(table(
        ["path", "kind", "sagas", "rows a saga", "sagas/s", "throughput / plain's",
         *(f"CPU ms {k}" for k in CPU_ACCOUNTS), "CPU ms per saga", "plain's CPU / this",
         "compensation p50 ms", "/ plain's"],
        rows,
    ))  # fmt: skip
    for title, totals in measured.paths.items():
        floor, saga = totals["floor"], totals[SAGACITY]
        print(
            f"\n{title}: Sagacity / floor: throughput {saga.per_s / floor.per_s:.2f}x, CPU per "
            f"saga {cpu_total_ms(saga) / cpu_total_ms(floor):.2f}x of the floor's "
            f"({cpu_total_ms(saga) - cpu_total_ms(floor):+.2f} ms a saga: Sagacity's own code)"
        )
    print(
        f"\nOne saga at a time ({args.sequential} per kind), all steps succeeding, from history, "
        f"task dispatch waits left out (medians):\n"
    )
    alone = measured.alone
    plain_s = percentile([s.own_s for s in alone["plain"]], 50)
    print(table(
        ["kind", "saga ms", "added per call ms", "history events", "activity ran ms"],
        [[kind, own * 1000, (own - plain_s) * 1000 / STEPS,
          percentile([s.events for s in shapes], 50),
          percentile([r for s in shapes for r in s.ran_s], 50) * 1000]
         for kind, shapes in alone.items()
         for own in [percentile([s.own_s for s in shapes], 50)]],
    ))  # fmt: skip
    commits = measured.commits
    print(
        f"\nA durable single-row commit on its own, outside any activity ({len(commits)} one "
        f"after another): p50 {percentile(commits, 50) * 1000:.2f} ms, p90 "
        f"{percentile(commits, 90) * 1000:.2f} ms"
    )


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.floor", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--sagas", type=positive, default=100, help="sagas per kind per round")
    parser.add_argument("--concurrency", type=positive, default=100, help="sagas in flight")
    parser.add_argument("--rounds", type=positive, default=4, help="rounds per kind and path (4)")
    parser.add_argument(
        "--sequential", type=positive, default=20, help="one-at-a-time sagas per kind (20)"
    )
    return parser.parse_args(argv)


@dataclass(frozen=True)
class Measured:
    """What one run measured: each path's totals per kind, the rows each kind journaled a saga
    (plain kinds), the compensation paths, the one-at-a-time sagas, lone commits."""

    paths: dict[str, dict[str, Totals]]
    rows: dict[str, dict[str, float]]
    compensation: dict[str, list[float]]
    alone: dict[str, list[Shape]]
    commits: list[float]


async def rows_a_saga(steps: Steps, totals: dict[str, Totals]) -> dict[str, float]:
    """The rows each plain kind journaled, per saga (0 for those that journal nothing)."""
    return {kind: await steps.rows(totals[kind].ids) / totals[kind].sagas for kind in FLOOR_KINDS}


async def measure(stack: BenchStack, args: argparse.Namespace, anchors: Anchors) -> Measured:
    settings = stack.settings
    async with contextlib.AsyncExitStack() as opened:
        url = await opened.enter_async_context(witness_process(anchors, stack.database_url))
        plugin, _ = await opened.enter_async_context(
            sagacity_plugin(settings, stack.database_url, anchors, [anchors.witness(url)])
        )
        steps = await opened.enter_async_context(Steps.opened(stack.database_url, settings))
        address, namespace = stack.temporal_address, stack.temporal_namespace
        saga_client = await Client.connect(address, namespace=namespace, plugins=[plugin])
        client = await Client.connect(address, namespace=namespace)
        await register(client)
        queues = {sandboxed: f"bench-floor-{uuid4().hex[:8]}" for sandboxed in (True, False)}
        for sandboxed, queue in queues.items():
            await opened.enter_async_context(
                Worker(
                    client,
                    task_queue=queue,
                    workflows=[FloorThreeSteps],
                    activities=[steps.step, steps.undo],
                    max_concurrent_activities=settings.max_concurrent_activities,
                    workflow_runner=(
                        SandboxedWorkflowRunner() if sandboxed else UnsandboxedWorkflowRunner()
                    ),
                )
            )
        saga_queue = f"bench-floor-sagacity-{uuid4().hex[:8]}"
        saga_worker = sagacity_worker(saga_client, saga_queue, settings)
        async with saga_worker, CpuMeter.open(stack.database_url) as meter:
            saga_rig = Rig({SAGACITY: saga_client}, {SAGACITY: saga_queue}, meter)
            rig = FloorRig(saga_rig, client, queues)
            for kind in KINDS:  # warm up: sandbox, connections, caches
                await batch(rig, kind, 10, 10, fail_last=False)
            paths = {
                SUCCEEDING: await rounds(rig, args, fail_last=False),
                FAILING: await rounds(rig, args, fail_last=True),
            }
            return Measured(
                paths=paths,
                rows={title: await rows_a_saga(steps, totals) for title, totals in paths.items()},
                compensation=await compensation_paths(rig, paths[FAILING]),
                alone=await one_at_a_time(rig, args.sequential),
                commits=await commit_latency(steps, 300),
            )


async def main() -> int:
    args = parse()
    async with bench_stack() as stack:
        with tempfile.TemporaryDirectory(prefix="sagacity-anchors-") as folder:
            measured = await measure(stack, args, Anchors.create(Path(folder)))
        report(measured, args, stack)
    return 0


if __name__ == "__main__":
    run(main)
