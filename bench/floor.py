"""The floor under ``bench.saga_overhead``: what a saga's guarantees cost with no Sagacity code.

A plain workflow of three trivial steps (``bench.floor_workflow``) is given, one at a time and
then together, what the guarantees of a durable journal, a prompt retry and a visible end ask of
the servers (tamper evidence, the rows' hashes, signed checkpoints and the transparency log, is
left on Sagacity's side of the comparison):

* ``journal``: each step commits a row before its work and a row after it, each its own durable
  single-row insert (two commits per call: INTENT before the tool runs, its outcome before the
  activity completes), and each undo one after its own (COMPENSATED);
* ``heartbeat timeout``: each step is scheduled with one (a dead worker's call is tried again
  within 30 s, not at the end of its start-to-close timeout);
* ``end state``: the workflow shows how it ended in the ``SagacityState`` search attribute
  (Temporal's own list answers "which sagas compensated").

Sagacity itself runs in the same rounds, as ``bench.saga_overhead`` runs it (a new user's
worker: checkpoints, the transparency log's sequencer and a witness, the codec, a keyring), and
again with its spec's engine version set (no patch marker, once a fleet allows it). All
kinds alternate round by round on one Temporal server and one Postgres; throughput and CPU per
saga are reported against plain's, with all steps succeeding and with the last failing (the
compensation path: a plain kind's failed activity to its last undo, from history; Sagacity's
FAILED row to its last COMPENSATED row, from the journal, as ``bench.saga_overhead`` measures
them); then, from sagas run one at a time, the latency each kind adds per call (from history, task
dispatch waits left out). The ``floor`` row is the most any code keeping those
guarantees could reach on this machine; Sagacity's distance from it is what its own code costs.

Run from the repository root: ``python -m bench.floor`` (embedded Postgres and in-memory
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
from typing import Any
from uuid import uuid4

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool
from temporalio import activity
from temporalio.client import Client
from temporalio.exceptions import ApplicationError, ApplicationErrorCategory
from temporalio.worker import Worker

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
from bench.saga_overhead import (
    Shape,
    failure_to_last_compensated_s,
    failure_to_last_undo_s,
    histories,
    shape,
)
from bench.sides import (
    SAGACITY,
    Anchors,
    Rig,
    execute,
    sagacity_plugin,
    sagacity_worker,
    witness_process,
)
from sagacity.store import JournalStore
from sagacity.temporal.visibility import register
from sagacity.workflow import ENGINE_VERSION

#: the kinds, in the order they are reported: plain first, Sagacity last
FLOOR_KINDS: dict[str, Adds] = {
    "plain": Adds(),
    "journal": Adds(journal=True),
    "heartbeat timeout": Adds(heartbeat_timeout=True),
    "end state": Adds(end_state=True),
    "floor": Adds(journal=True, heartbeat_timeout=True, end_state=True),
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
    at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (workflow_id, seq)
)
"""
_INSERT = "INSERT INTO floor_rows (workflow_id, seq, phase) VALUES (%s, %s, %s)"


class Steps:
    """The floor's step and undo: the plain ones' trivial work, journaled when asked."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        self.pool = pool

    @activity.defn(name=STEP)
    async def step(self, workflow_id: str, n: int, journal: bool, fail: bool) -> dict[str, int]:
        if journal:
            await self._commit(workflow_id, 2 * n - 1, "intent")
        if fail:
            if journal:
                await self._commit(workflow_id, 2 * n, "failed")
            # BENIGN, as bench.overhead_workload's step that says no
            raise ApplicationError(
                f"step {n} said no",
                type="StepRefused",
                non_retryable=True,
                category=ApplicationErrorCategory.BENIGN,
            )
        if journal:
            await self._commit(workflow_id, 2 * n, "executed")
        return {"n": n}

    @activity.defn(name=UNDO)
    async def undo(self, workflow_id: str, n: int, journal: bool) -> None:
        if journal:
            await self._commit(workflow_id, 2 * STEPS + n, "compensated")

    async def _commit(self, workflow_id: str, seq: int, phase: str) -> None:
        async with self.pool.connection() as conn:
            await conn.execute(_INSERT, (workflow_id, seq, phase))


@dataclass
class Totals:
    """Sagas of one kind: how many, their wall time together, and the CPU they cost."""

    sagas: int = 0
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(CPU_ACCOUNTS, 0.0))
    ids: list[str] = field(default_factory=list)

    @property
    def per_s(self) -> float:
        return self.sagas / self.wall_s if self.wall_s else 0.0

    def cpu_ms(self) -> dict[str, float]:
        """CPU ms per saga by account (NaN: that server is not on this machine)."""
        return {k: v / self.sagas * 1000 for k, v in self.cpu_s.items()}

    def cpu_total_ms(self) -> float:
        return sum(v for v in self.cpu_ms().values() if not math.isnan(v))


@dataclass(frozen=True)
class FloorRig:
    """Sagacity's rig (bench.sides) and the floor kinds' client and task queue."""

    sagacity: Rig
    journal: JournalStore
    client: Client
    task_queue: str

    def client_of(self, kind: str) -> Client:
        return self.sagacity.clients[SAGACITY] if kind in (SAGACITY, PINNED) else self.client


async def one(rig: FloorRig, kind: str, *, fail_last: bool = False) -> str:
    """Run one saga of ``kind`` to its end; its workflow id. Raises on a wrong outcome."""
    if kind in (SAGACITY, PINNED):
        version = ENGINE_VERSION if kind == PINNED else None
        return await execute(rig.sagacity, SAGACITY, fail_last=fail_last, engine_version=version)
    wid = f"bench-floor-{uuid4().hex[:12]}"
    result = await rig.client.execute_workflow(
        NAME,
        args=[FLOOR_KINDS[kind], fail_last],
        id=wid,
        task_queue=rig.task_queue,
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
            got = await batch(rig, kind, args.sagas, args.concurrency, fail_last=fail_last)
            t = totals[kind]
            t.sagas += got.sagas
            t.wall_s += got.wall_s
            t.cpu_s = {k: t.cpu_s[k] + got.cpu_s[k] for k in CPU_ACCOUNTS}
            t.ids += got.ids
    return totals


async def compensation_paths(rig: FloorRig, failing: dict[str, Totals]) -> dict[str, list[float]]:
    """Each kind's compensation path per failing saga (seconds), as bench.saga_overhead has it."""
    paths: dict[str, list[float]] = {}
    for kind, totals in failing.items():
        if kind in (SAGACITY, PINNED):
            paths[kind] = [await failure_to_last_compensated_s(rig.journal, i) for i in totals.ids]
        else:
            found = await histories(rig.client, totals.ids)
            paths[kind] = [failure_to_last_undo_s(h) for h in found]
    return paths


def report(
    paths: dict[str, dict[str, Totals]],
    compensation: dict[str, list[float]],
    alone: dict[str, list[Shape]],
    args: argparse.Namespace,
    stack: BenchStack,
) -> None:
    print("\n# The floor: what a saga's guarantees cost with no Sagacity code")
    print(f"machine: {machine()}")
    print(f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin}")
    print(
        f"{args.rounds} alternating rounds of {args.sagas} sagas per kind and path, "
        f"{args.concurrency} in flight, {STEPS} trivial steps each\n"
    )
    plain_path = percentile(compensation["plain"], 50)
    rows: list[list[object]] = []
    for title, totals in paths.items():
        plain = totals["plain"]
        for kind in KINDS:
            t = totals[kind]
            cpu = t.cpu_ms()
            comp = [percentile(compensation[kind], 50) * 1000] if title == FAILING else [""]
            rows.append([
                title, kind, t.sagas, t.per_s, f"{t.per_s / plain.per_s:.2f}x",
                *(cpu[k] for k in CPU_ACCOUNTS), t.cpu_total_ms(),
                f"{plain.cpu_total_ms() / t.cpu_total_ms():.2f}x", *comp,
                f"{percentile(compensation[kind], 50) / plain_path:.2f}x"
                if title == FAILING else "",
            ])  # fmt: skip
    print(table(
        ["path", "kind", "sagas", "sagas/s", "throughput / plain's",
         *(f"CPU ms {k}" for k in CPU_ACCOUNTS), "CPU ms per saga", "plain's CPU / this",
         "compensation p50 ms", "/ plain's"],
        rows,
    ))  # fmt: skip
    for title, totals in paths.items():
        floor, saga = totals["floor"], totals[SAGACITY]
        print(
            f"\n{title}: Sagacity / floor: throughput {saga.per_s / floor.per_s:.2f}x, CPU per "
            f"saga {saga.cpu_total_ms() / floor.cpu_total_ms():.2f}x of the floor's "
            f"({saga.cpu_total_ms() - floor.cpu_total_ms():+.2f} ms a saga: Sagacity's own code)"
        )
    print(
        f"\nOne saga at a time ({args.sequential} per kind), all steps succeeding, from history, "
        f"task dispatch waits left out (medians):\n"
    )
    plain_s = percentile([s.own_s for s in alone["plain"]], 50)
    print(table(
        ["kind", "saga ms", "added per call ms", "history events", "activity ran ms"],
        [[kind, own * 1000, (own - plain_s) * 1000 / STEPS,
          percentile([s.events for s in shapes], 50),
          percentile([r for s in shapes for r in s.ran_s], 50) * 1000]
         for kind, shapes in alone.items()
         for own in [percentile([s.own_s for s in shapes], 50)]],
    ))  # fmt: skip


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


async def measure(stack: BenchStack, args: argparse.Namespace, anchors: Anchors) -> None:
    settings = stack.settings
    async with contextlib.AsyncExitStack() as opened:
        url = await opened.enter_async_context(witness_process(anchors, stack.database_url))
        plugin, journal = await opened.enter_async_context(
            sagacity_plugin(settings, stack.database_url, anchors, [anchors.witness(url)])
        )
        pool: AsyncConnectionPool[AsyncConnection[Any]] = AsyncConnectionPool(
            stack.database_url,
            min_size=settings.pool_min_size,
            max_size=settings.pool_max_size,
            kwargs={"autocommit": True},
            open=False,
        )
        await pool.open(wait=True)
        opened.push_async_callback(pool.close)
        async with pool.connection() as conn:
            await conn.execute(_TABLE)
        address, namespace = stack.temporal_address, stack.temporal_namespace
        saga_client = await Client.connect(address, namespace=namespace, plugins=[plugin])
        client = await Client.connect(address, namespace=namespace)
        await register(client)
        queues = {kind: f"bench-floor-{kind}-{uuid4().hex[:8]}" for kind in ("floor", SAGACITY)}
        steps = Steps(pool)
        floor_worker = Worker(
            client,
            task_queue=queues["floor"],
            workflows=[FloorThreeSteps],
            activities=[steps.step, steps.undo],
            max_concurrent_activities=settings.max_concurrent_activities,
        )
        saga_worker = sagacity_worker(saga_client, queues[SAGACITY], settings)
        async with floor_worker, saga_worker, CpuMeter.open(stack.database_url) as meter:
            saga_rig = Rig({SAGACITY: saga_client}, {SAGACITY: queues[SAGACITY]}, meter)
            rig = FloorRig(saga_rig, journal, client, queues["floor"])
            for kind in KINDS:  # warm up: sandbox, connections, caches
                await batch(rig, kind, 10, 10, fail_last=False)
            paths = {
                SUCCEEDING: await rounds(rig, args, fail_last=False),
                FAILING: await rounds(rig, args, fail_last=True),
            }
            compensation = await compensation_paths(rig, paths[FAILING])
            alone = await one_at_a_time(rig, args.sequential)
    report(paths, compensation, alone, args, stack)


async def main() -> int:
    args = parse()
    async with bench_stack() as stack:
        with tempfile.TemporaryDirectory(prefix="sagacity-anchors-") as folder:
            await measure(stack, args, Anchors.create(Path(folder)))
    return 0


if __name__ == "__main__":
    run(main)
