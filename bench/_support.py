"""What the benchmark scripts share: a scratch database on the dev stack, percentiles, tables.

Each script measures Sagacity and its baseline in the same run, on the same servers, and reports
ratios; absolute figures depend on the machine and are printed only to give the ratios a scale.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg

from sagacity.cli._exit import exit_now
from sagacity.devstack import DevStack
from sagacity.settings import Settings, load_settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.migrate import migrate


@dataclass(frozen=True)
class BenchStack:
    """The servers one benchmark run uses, and a fresh migrated database of its own on them."""

    settings: Settings
    database_url: str
    temporal_address: str
    temporal_namespace: str
    #: "embedded" when this run started the service, else the configured address
    postgres_origin: str
    temporal_origin: str


@asynccontextmanager
async def bench_stack(
    *, temporal: bool = True, temporal_db: Path | None = None
) -> AsyncIterator[BenchStack]:
    """Start what the environment leaves unset and make a scratch database.

    Temporal is the dev server, in memory, or with ``temporal_db`` its state in that file (a
    server with persistence, as one that keeps its sagas across restarts runs). The database is
    dropped at the end, so runs neither see nor leave each other's rows.
    """
    settings = load_settings()
    stack = DevStack(settings, temporal_db=temporal_db or "memory", temporal=temporal)
    endpoints = await stack.start()
    name = f"sagacity_bench_{uuid4().hex[:12]}"
    try:
        url = await ensure_database(endpoints.database_url, name)
        try:
            await migrate(url)
            yield BenchStack(
                settings=settings,
                database_url=url,
                temporal_address=endpoints.temporal_address,
                temporal_namespace=endpoints.temporal_namespace,
                postgres_origin="embedded" if stack.runs_postgres else "SAGACITY_DATABASE_URL",
                temporal_origin=(
                    "TEMPORAL_ADDRESS"
                    if not stack.runs_temporal
                    else "embedded, in memory"
                    if temporal_db is None
                    else "embedded dev server, state in a database file (SQLite)"
                ),
            )
        finally:
            await drop_database(endpoints.database_url, name)
    finally:
        await stack.stop()


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) by the nearest-rank method; NaN for no values."""
    if not values:
        return math.nan
    ranked = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ranked)))
    return ranked[rank - 1]


def table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    """A Markdown table (pastes straight into the README), columns padded for the terminal."""
    cells = [[str(h) for h in headers], *[[_cell(v) for v in row] for row in rows]]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in cells
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def _cell(value: object) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


#: what :class:`CpuMeter` reports on
CPU_ACCOUNTS = ("this process", "temporal", "postgres")
#: and, when it watches processes of this run's own (:attr:`CpuMeter.watched`), them
WATCHED = "watched"

_Reading = dict[str, dict[int, float]]


class CpuMeter:
    """CPU seconds used by this process, this run's Temporal server and the Postgres backends
    serving this run's database, so that others' load on a shared machine is not counted.

    Servers are found in /proc: the Temporal server as a ``temporal`` child of this process (the
    dev stack's), backends by ``pg_stat_activity``. A server elsewhere reports NaN. Processes
    put in :attr:`watched` (a run's worker processes, say) are reported each on its own, by
    pid, under :data:`WATCHED`.
    """

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self._conn = conn
        self.watched: frozenset[int] = frozenset()

    @property
    def conn(self) -> psycopg.AsyncConnection[Any]:
        """The meter's connection to the run's database (left out of what it measures)."""
        return self._conn

    @classmethod
    @asynccontextmanager
    async def open(cls, database_url: str) -> AsyncIterator[CpuMeter]:
        async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
            yield cls(conn)

    async def reading(self) -> _Reading:
        cur = await self._conn.execute(
            "SELECT pid FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        backends = {int(pid) for (pid,) in await cur.fetchall()}
        used: _Reading = {"this process": {0: time.process_time()}, "temporal": {}, "postgres": {}}
        if self.watched:
            used[WATCHED] = {}
        me = os.getpid()
        for pid, (command, ppid, cpu_s) in _processes().items():
            if pid in self.watched:
                used[WATCHED][pid] = cpu_s
            elif pid in backends:
                used["postgres"][pid] = cpu_s
            elif command == "temporal" and ppid == me:
                used["temporal"][pid] = cpu_s
        return used

    async def since(self, earlier: _Reading) -> dict[str, float]:
        """CPU seconds per account since ``earlier`` (a process born since counts from zero)."""
        return spent(earlier, await self.reading())


def spent(earlier: _Reading, now: _Reading) -> dict[str, float]:
    """CPU seconds per account (NaN: none of its processes seen) between two readings."""
    return {
        account: sum(each.values()) if (each := spent_each(earlier, now, account)) else math.nan
        for account in (*CPU_ACCOUNTS, *((WATCHED,) if WATCHED in now else ()))
    }


def spent_each(earlier: _Reading, now: _Reading, account: str) -> dict[int, float]:
    """CPU seconds of each process of ``account`` between two readings, by pid."""
    before = earlier.get(account, {})
    return {pid: s - before.get(pid, 0.0) for pid, s in now.get(account, {}).items()}


def _processes() -> dict[int, tuple[str, int, float]]:
    """pid -> (command, parent pid, CPU seconds) of every process /proc shows."""
    tick = os.sysconf("SC_CLK_TCK")
    found = {}
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_path.read_text(encoding="ascii", errors="replace")
        except OSError:
            continue  # gone since the listing
        close = text.rindex(")")  # the command may itself hold parentheses
        fields = text[close + 1 :].split()
        command = text[text.index("(") + 1 : close]
        found[int(stat_path.parent.name)] = (
            command,
            int(fields[1]),
            (int(fields[11]) + int(fields[12])) / tick,
        )
    return found


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected 1 or more, got {value}")
    return value


def machine() -> str:
    """One line naming what the figures were measured on."""
    return f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def run(main: Callable[[], Coroutine[Any, Any, int]]) -> None:
    """Run a benchmark's ``main`` and exit with its status, past the Temporal SDK's teardown crash."""
    exit_now(asyncio.run(main()))
