"""Journal append throughput against a raw single-row INSERT into a table of the same shape.

Three ways of writing, each with ``--writers`` concurrent writers on a pool of as many
connections, against the baseline (a plain psycopg ``INSERT`` of an equivalent row into
``bench_raw_journal``, created ``LIKE side_effect_journal``: same columns, key and index):

* ``append``, one saga: every writer appends to the same saga (``JournalStore.append``: the
  per-saga queue, the tail read, hashing, the predecessor check); raw writers share a counter;
* ``append``, many sagas: each writer appends to a saga of its own;
* ``append_at``, many sagas: the saga runtime's path (the workflow knows seq and prev hash).

Target: the journal at 0.5x the raw rows/s or better. Rounds alternate which side goes first.
Run from the repository root: ``python -m bench.journal_appends``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from uuid import uuid4

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
from sagacity.journal import GENESIS_HASH, Draft, Phase
from sagacity.store import JournalStore, Pool, open_pool

TARGET_RATIO = 0.5
RAW_TABLE = "bench_raw_journal"
_RAW_INSERT = (
    f"INSERT INTO {RAW_TABLE} (saga_id, seq, tool_name, phase, input, payload, timestamp, hash) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
#: what the raw rows carry in the hash column: same width, nothing computed
_RAW_HASH = "0" * 64
_ACCOUNTS = ("this process", "postgres")

#: makes writer ``w``'s write-one-row function for run ``run_id``; it is called with the row index
WriterFactory = Callable[[str, int], Callable[[int], Awaitable[object]]]


def draft(saga_id: str, i: int) -> Draft:
    """The row every writer writes, journal and raw alike."""
    return Draft(saga_id, "bench_tool", Phase.EXECUTED, f'{{"n":{i}}}', '{"ok":true}')


@dataclass
class Side:
    """One side of a comparison, summed over rounds."""

    rows: int = 0
    wall_s: float = 0.0
    latencies_s: list[float] = field(default_factory=list)
    cpu_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(_ACCOUNTS, 0.0))

    @property
    def per_s(self) -> float:
        return self.rows / self.wall_s if self.wall_s else 0.0


@dataclass(frozen=True)
class Scenario:
    name: str
    journal: WriterFactory
    raw: WriterFactory


def scenarios(journal: JournalStore, pool: Pool) -> list[Scenario]:
    async def raw_insert(saga_id: str, seq: int, i: int) -> None:
        row = draft(saga_id, i)
        async with pool.connection() as conn:
            await conn.execute(
                _RAW_INSERT,
                (saga_id, seq, row.tool_name, row.phase.value, row.input, row.payload,
                 datetime.now(UTC).replace(tzinfo=None), _RAW_HASH),
            )  # fmt: skip

    # raw writers of one saga take seqs from a counter per run: no coordination beyond that
    shared_seqs: defaultdict[str, Iterator[int]] = defaultdict(lambda: itertools.count(1))

    def chained(run_id: str, w: int) -> Callable[[int], Awaitable[object]]:
        saga, head = f"{run_id}-{w}", [GENESIS_HASH]

        async def write(i: int) -> None:
            entry = await journal.append_at(draft(saga, i), seq=i + 1, prev_hash=head[0])
            head[0] = entry.hash

        return write

    def raw_own_saga(run_id: str, w: int) -> Callable[[int], Awaitable[object]]:
        return lambda i: raw_insert(f"{run_id}-{w}", i + 1, i)

    return [
        Scenario(
            "append, one saga",
            lambda run_id, w: lambda i: journal.append(draft(f"{run_id}-one", i)),
            lambda run_id, w: lambda i: raw_insert(f"{run_id}-one", next(shared_seqs[run_id]), i),
        ),
        Scenario(
            "append, a saga per writer",
            lambda run_id, w: lambda i: journal.append(draft(f"{run_id}-{w}", i)),
            raw_own_saga,
        ),
        Scenario("append_at, a saga per writer", chained, raw_own_saga),
    ]


async def measure_side(
    factory: WriterFactory, writers: int, rows: int, meter: CpuMeter, side: Side
) -> None:
    """``writers`` writers write ``rows`` rows between them; adds the figures to ``side``."""
    run_id = uuid4().hex[:12]
    per_writer = rows // writers

    async def writer(write: Callable[[int], Awaitable[object]]) -> list[float]:
        latencies = []
        for i in range(per_writer):
            began = time.perf_counter()
            await write(i)
            latencies.append(time.perf_counter() - began)
        return latencies

    cpu = await meter.reading()
    began = time.perf_counter()
    results = await asyncio.gather(*(writer(factory(run_id, w)) for w in range(writers)))
    side.wall_s += time.perf_counter() - began
    used = await meter.since(cpu)
    side.rows += per_writer * writers
    side.latencies_s += [lat for r in results for lat in r]
    for account in _ACCOUNTS:
        side.cpu_s[account] += used[account]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.journal_appends", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--writers", type=positive, default=16, help="concurrent writers (16)")
    parser.add_argument(
        "--rows", type=positive, default=3200, help="rows per side per round (3200)"
    )
    parser.add_argument("--rounds", type=positive, default=5, help="rounds (5)")
    return parser.parse_args(argv)


def ms(seconds: float) -> float:
    return seconds * 1000


async def measure(stack: BenchStack, args: argparse.Namespace) -> None:
    pool = await open_pool(stack.database_url, min_size=args.writers, max_size=args.writers)
    journal = JournalStore(pool)
    async with pool.connection() as conn:
        await conn.execute(f"CREATE TABLE {RAW_TABLE} (LIKE side_effect_journal INCLUDING ALL)")
    results: list[tuple[Scenario, Side, Side]] = []
    try:
        async with CpuMeter.open(stack.database_url) as meter:
            for scenario in scenarios(journal, pool):
                mine, raw = Side(), Side()
                for factory in (scenario.journal, scenario.raw):  # warm up: prepared statements
                    await measure_side(factory, args.writers, args.writers * 10, meter, Side())
                for r in range(args.rounds):
                    sides = [(scenario.journal, mine), (scenario.raw, raw)]
                    for factory, side in sides if r % 2 == 0 else reversed(sides):
                        await measure_side(factory, args.writers, args.rows, meter, side)
                results.append((scenario, mine, raw))
            verdicts = [v async for v in journal.verify_all()]
    finally:
        await pool.close()

    print("\n# Journal appends vs raw single-row INSERT")
    print(f"machine: {machine()}")
    print(f"Postgres: {stack.postgres_origin}")
    print(
        f"{args.writers} concurrent writers on a pool of {args.writers} connections; "
        f"{args.rounds} alternating rounds of {args.rows} rows per side\n"
    )
    rows = []
    for scenario, mine, raw in results:
        ratio = mine.per_s / raw.per_s if raw.per_s else math.nan
        verdict = "meets" if ratio >= TARGET_RATIO else "misses"
        for label, side, note in (
            ("raw INSERT", raw, ""),
            ("journal", mine, f"{ratio:.2f}x ({verdict} {TARGET_RATIO}x)"),
        ):
            rows.append([
                scenario.name, label, side.rows, side.per_s,
                ms(percentile(side.latencies_s, 50)), ms(percentile(side.latencies_s, 99)),
                *(ms(side.cpu_s[a] / side.rows) for a in _ACCOUNTS), note,
            ])  # fmt: skip
    print(table(
        ["writes", "kind", "rows", "rows/s", "p50 ms", "p99 ms",
         *(f"CPU ms/row, {a}" for a in _ACCOUNTS), "journal / raw"],
        rows,
    ))  # fmt: skip
    broken = sum(not v.ok for v in verdicts)
    print(
        f"\nchains written by the journal, verified afterwards: {len(verdicts)}, broken: {broken}"
    )


async def main() -> int:
    args = parse()
    async with bench_stack(temporal=False) as stack:
        await measure(stack, args)
    return 0


if __name__ == "__main__":
    run(main)
