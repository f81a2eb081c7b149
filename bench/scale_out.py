"""Throughput as worker processes are added: Sagacity against plain Temporal at 1, 2, 4... workers.

One Temporal dev server keeping its state in a database file (a server with persistence) and
one Postgres serve N worker processes of each kind, started together and polling throughout;
this process is the client, keeping a fixed number of sagas of one kind in flight (each a closed
loop: start a saga, await its end, start the next) and counting the sagas that end in a measured
window after a warm-up. For each N and in-flight count the two kinds run in turn, the kind that
goes first alternating from one pair of phases to the next, so neither always runs on a warmer
server or a quieter machine. Both run the three trivial steps of ``bench.saga_overhead``
(``bench.overhead_workload``).

Each Sagacity worker process runs as a deployment's ``sagacity worker`` does: the plugin on a
journal pool of its own, signing checkpoints into the one checkpoint directory all workers share,
the payload codec, the decision keyring, and its own transparency-log sequencer (every worker of
a deployment runs one; they take turns under an advisory lock), each head cosigned by one witness
process. Each plain worker process runs a plain worker of plain activities.

Reported per N, in-flight count and kind: sagas/s and Sagacity's over plain's (target: 0.9x or
better at every N, and growing with N as plain's does); CPU ms per saga of the worker processes
(each, mean, and all), of the client, the Temporal server and the Postgres backends serving the
run's database; what the Temporal server wrote to storage per saga; each worker's CPU use (busy
share of one core, least and most busy), and what shows whether anything serializes the
workers: the journal connections found waiting on a lock, sampled from ``pg_stat_activity``
(the sequencers' turn-taking counted apart). A PNG plots sagas/s against workers and against
sagas in flight. Temporal and Postgres are fresh for each N (a growing database file slows the
server down, which would count against the larger N).

Run from the repository root: ``python -m bench.scale_out`` (embedded Postgres; set
``SAGACITY_DATABASE_URL`` to measure your own; Temporal is always this run's dev server).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from temporalio.client import Client

from bench._support import (
    WATCHED,
    BenchStack,
    CpuMeter,
    bench_stack,
    machine,
    percentile,
    positive,
    run,
    spent,
    spent_each,
    table,
)
from bench.plain_workflow import STEPS
from bench.sides import (
    KINDS,
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
from sagacity.settings import load_settings
from sagacity.temporal.plugin import SagacityPlugin

TARGET_RATIO = 0.9
ROOT = Path(__file__).resolve().parents[1]
DEFAULT_PLOT = Path("docs/bench/scale_out.png")
#: how long a worker process may take to start polling
READY_TIMEOUT_S = 180.0


# -- a worker process --------------------------------------------------------------------------


@dataclass(frozen=True)
class WorkerSpec:
    """What one worker process serves, and where (passed as JSON on its command line)."""

    kind: str
    task_queue: str
    database_url: str
    temporal_address: str
    temporal_namespace: str
    anchors: str
    witness_url: str


async def serve_worker(spec: WorkerSpec) -> int:
    """Serve ``spec``'s task queue until SIGTERM; say ``ready`` on stdout once polling."""
    settings = load_settings()
    connect = {"target_host": spec.temporal_address, "namespace": spec.temporal_namespace}
    async with contextlib.AsyncExitStack() as opened:
        if spec.kind == SAGACITY:
            anchors = Anchors(Path(spec.anchors))
            witnesses = [anchors.witness(spec.witness_url)]
            plugin, _ = await opened.enter_async_context(
                sagacity_plugin(settings, spec.database_url, anchors, witnesses)
            )
            client = await Client.connect(**connect, plugins=[plugin])  # type: ignore[arg-type]
            worker = sagacity_worker(client, spec.task_queue, settings)
        else:
            client = await Client.connect(**connect)  # type: ignore[arg-type]
            worker = plain_worker(client, spec.task_queue, settings)
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with worker:
            print("ready", flush=True)
            await stop.wait()
    return 0


@contextlib.asynccontextmanager
async def fleet(specs: Sequence[WorkerSpec], logs: Path) -> AsyncIterator[dict[str, list[int]]]:
    """Start a worker process per spec, wait until each polls, yield their pids by kind; stop
    them (SIGTERM: each lets its in-flight activities finish)."""
    processes: list[tuple[asyncio.subprocess.Process, Path]] = []
    try:
        for i, spec in enumerate(specs):
            log = logs / f"{spec.kind}-{len(specs)}-{i}.log"
            with log.open("wb") as err:
                process = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "bench.scale_out", "--worker", json.dumps(asdict(spec)),
                    cwd=ROOT, stdout=asyncio.subprocess.PIPE, stderr=err,
                )  # fmt: skip
            processes.append((process, log))
        for process, log in processes:
            assert process.stdout is not None
            line = b""
            with contextlib.suppress(TimeoutError):
                line = await asyncio.wait_for(process.stdout.readline(), READY_TIMEOUT_S)
            if line.strip() != b"ready":
                tail = log.read_text(errors="replace")[-2000:]
                raise RuntimeError(f"a worker process did not start; its log ends:\n{tail}")
        pids: dict[str, list[int]] = {spec.kind: [] for spec in specs}
        for spec, (process, _) in zip(specs, processes, strict=True):
            pids[spec.kind].append(process.pid)
        yield pids
    finally:
        for process, _ in processes:
            if process.returncode is None:
                process.send_signal(signal.SIGTERM)
        for process, _ in processes:
            try:
                await asyncio.wait_for(process.wait(), 60)
            except TimeoutError:
                process.kill()
                await process.wait()


# -- the client --------------------------------------------------------------------------------


@dataclass
class Phase:
    """Sagas of one kind at one worker count and in-flight count, in the measured window."""

    kind: str
    workers: int
    in_flight: int
    sagas: int = 0
    wall_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)
    #: CPU seconds of each worker process, by pid
    worker_cpu_s: dict[int, float] = field(default_factory=dict)
    latencies_s: list[float] = field(default_factory=list)
    #: journal connections, summed over samples: active, and of those waiting on a lock
    active: int = 0
    lock_waits: int = 0
    #: sequencers found waiting for their turn, summed over samples
    sequencer_waits: int = 0
    samples: int = 0
    #: bytes the Temporal server wrote to storage (its database file)
    temporal_written: int = 0

    @property
    def per_s(self) -> float:
        return self.sagas / self.wall_s if self.wall_s else 0.0


# a sequencer waits for its turn in pg_advisory_lock; journal appends take xact locks
WAITS_SQL = """
SELECT count(*) FILTER (WHERE state = 'active' AND query NOT LIKE '%%pg_advisory_lock(%%'),
       count(*) FILTER (WHERE wait_event_type = 'Lock'
                        AND query NOT LIKE '%%pg_advisory_lock(%%'),
       count(*) FILTER (WHERE wait_event_type = 'Lock' AND query LIKE '%%pg_advisory_lock(%%')
FROM pg_stat_activity
WHERE datname = current_database() AND pid <> pg_backend_pid()
"""


async def sample_waits(meter: CpuMeter, phase: Phase, every_s: float = 0.2) -> None:
    """Sample the run's database connections until cancelled: active ones, lock waits."""
    while True:
        cur = await meter.conn.execute(WAITS_SQL)
        row = await cur.fetchone()
        assert row is not None
        phase.active += int(row[0])
        phase.lock_waits += int(row[1])
        phase.sequencer_waits += int(row[2])
        phase.samples += 1
        await asyncio.sleep(every_s)


async def closed_loop(rig: Rig, phase: Phase, args: argparse.Namespace) -> None:
    """Keep ``phase.in_flight`` sagas running; add what the window after the warm-up measured
    to ``phase``. The warm-up lasts ``args.warmup`` seconds and until as many sagas have ended
    as are in flight (the first burst is behind), the window ``args.seconds``."""
    ended: list[tuple[float, float]] = []  # (when it ended, its latency)
    stopping = asyncio.Event()

    async def lane() -> None:
        while not stopping.is_set():
            began = time.perf_counter()
            await execute(rig, phase.kind, fail_last=args.fail_last)
            ended.append((time.perf_counter(), time.perf_counter() - began))

    lanes = [asyncio.create_task(lane()) for _ in range(phase.in_flight)]
    try:
        await _running(lanes, args.warmup)
        while len(ended) < phase.in_flight:
            await _running(lanes, 0.1)
        before, start = await rig.meter.reading(), time.perf_counter()
        written_before = written(before["temporal"])
        sampler = asyncio.create_task(sample_waits(rig.meter, phase))
        try:
            await _running(lanes, args.seconds)
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
        end, after = time.perf_counter(), await rig.meter.reading()
        phase.temporal_written += written(after["temporal"]) - written_before
        stopping.set()
        await asyncio.gather(*lanes)  # the sagas in flight end; not counted
    finally:
        for task in lanes:
            task.cancel()
    measured = [latency for at, latency in ended if start <= at < end]
    phase.latencies_s += measured
    phase.sagas += len(measured)
    phase.wall_s += end - start
    for account, cpu_s in spent(before, after).items():
        phase.cpu_s[account] = phase.cpu_s.get(account, 0.0) + cpu_s
    for pid, cpu_s in spent_each(before, after, WATCHED).items():
        phase.worker_cpu_s[pid] = phase.worker_cpu_s.get(pid, 0.0) + cpu_s


def written(pids: Iterable[int]) -> int:
    """Bytes the processes ``pids`` have written to storage (``/proc/<pid>/io``)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/io").read_text().splitlines():
                if line.startswith("write_bytes:"):
                    total += int(line.split()[1])
    return total


async def _running(lanes: Sequence[asyncio.Task[None]], seconds: float) -> None:
    """Wait ``seconds``, raising at once if a lane fails (a saga ended wrong, say)."""
    done, _ = await asyncio.wait(lanes, timeout=seconds, return_when=asyncio.FIRST_EXCEPTION)
    for task in done:
        task.result()


async def measure(
    n: int, args: argparse.Namespace, scratch: Path, first_turn: int
) -> tuple[BenchStack, list[Phase]]:
    """Measure ``n`` workers of each kind on servers of their own: a fresh Temporal dev server
    (its database file new: a file that grows makes the server slower) and a fresh database."""
    folder = args.temporal_dir or scratch
    db = folder / f"temporal-{scratch.name}-{n}.db"
    try:
        async with bench_stack(temporal_db=None if args.temporal_in_memory else db) as stack:
            return stack, await measure_on(stack, n, args, scratch / f"{n}-workers", first_turn)
    finally:
        for leftover in folder.glob(f"{db.name}*"):  # the file, its journal and lock files
            leftover.unlink()


async def measure_on(
    stack: BenchStack, n: int, args: argparse.Namespace, scratch: Path, turn: int
) -> list[Phase]:
    anchors = Anchors.create(scratch / "anchors")
    logs = scratch / "logs"
    logs.mkdir()
    connect = {"target_host": stack.temporal_address, "namespace": stack.temporal_namespace}
    # the client a deployment starts sagas with: the converter and codec its workers read
    clients = {
        SAGACITY: await Client.connect(
            **connect,  # type: ignore[arg-type]
            plugins=[SagacityPlugin(codec=anchors.codec)],
        ),
        PLAIN: await Client.connect(**connect),  # type: ignore[arg-type]
    }
    queues = task_queues()
    phases: list[Phase] = []
    async with (
        witness_process(anchors, stack.database_url) as witness_url,
        CpuMeter.open(stack.database_url) as meter,
    ):
        rig = Rig(clients, queues, meter)
        specs = [
            WorkerSpec(
                kind, queues[kind], stack.database_url, stack.temporal_address,
                stack.temporal_namespace, str(anchors.folder), witness_url,
            )
            for kind in KINDS for _ in range(n)
        ]  # fmt: skip
        # both kinds' fleets poll throughout; only the measured kind has sagas to run
        async with fleet(specs, logs) as pids:
            for in_flight in args.in_flight:
                of_n = {kind: Phase(kind, n, in_flight) for kind in KINDS}
                for _ in range(args.rounds):
                    # the kind that goes first alternates: plain, Sagacity | Sagacity, plain
                    for kind in KINDS if turn % 2 == 0 else KINDS[::-1]:
                        meter.watched = frozenset(pids[kind])
                        await closed_loop(rig, of_n[kind], args)
                    turn += 1
                phases += of_n.values()
                print(
                    f"  {n} workers, {in_flight} in flight: "
                    + ", ".join(f"{k} {p.per_s:.1f} sagas/s" for k, p in of_n.items()),
                    file=sys.stderr,
                )
    return phases


# -- report ------------------------------------------------------------------------------------


def ms(seconds: float) -> float:
    return seconds * 1000


def rows(phases: Sequence[Phase]) -> list[list[object]]:
    plain = {(p.workers, p.in_flight): p.per_s for p in phases if p.kind == PLAIN}
    out: list[list[object]] = []
    for p in sorted(phases, key=lambda p: (p.workers, p.in_flight, KINDS.index(p.kind))):
        base = plain.get((p.workers, p.in_flight), 0.0)
        ratio = p.per_s / base if base else float("nan")
        note = ""
        if p.kind == SAGACITY:
            verdict = "meets" if ratio >= TARGET_RATIO else "misses"
            note = f"{ratio:.2f}x ({verdict} {TARGET_RATIO}x)"
        busy = [s / p.wall_s * 100 for s in p.worker_cpu_s.values()] or [float("nan")]
        per = ms(sum(p.worker_cpu_s.values()) / p.sagas) if p.sagas else float("nan")
        out.append([
            p.workers, p.in_flight, p.kind, p.sagas, p.per_s, note,
            ms(percentile(p.latencies_s, 50)),
            per / p.workers, per,
            *(ms(p.cpu_s[k] / p.sagas) if p.sagas else float("nan")
              for k in ("this process", "temporal", "postgres")),
            p.temporal_written / 1024 / p.sagas if p.sagas else float("nan"),
            f"{min(busy):.0f}-{max(busy):.0f}",
            p.active / p.samples if p.samples else float("nan"),
            p.lock_waits / p.active * 100 if p.active else 0.0,
            p.sequencer_waits / p.samples if p.samples else float("nan"),
        ])  # fmt: skip
    return out


HEADERS = [
    "workers", "in flight", "kind", "sagas", "sagas/s", "Sagacity / plain", "p50 ms",
    "CPU ms/saga per worker (mean)", "all workers", "client", "temporal", "postgres",
    "temporal KiB written/saga",
    "worker CPU % (least-most busy)", "active journal connections", "of which waiting on a lock %",
    "sequencers waiting their turn",
]  # fmt: skip


def scaling(phases: Sequence[Phase]) -> list[str]:
    """Per kind and in-flight count: sagas/s at the most workers over that at the fewest."""
    lines = []
    for in_flight in sorted({p.in_flight for p in phases}):
        by_kind = []
        for kind in KINDS:
            runs = sorted(
                (p.workers, p.per_s) for p in phases if (p.kind, p.in_flight) == (kind, in_flight)
            )
            if len(runs) > 1 and runs[0][1]:
                by_kind.append(f"{kind} {runs[-1][1] / runs[0][1]:.2f}x")
        if by_kind:
            fewest = min(p.workers for p in phases)
            most = max(p.workers for p in phases)
            lines.append(
                f"{in_flight} in flight, {fewest} -> {most} workers: " + ", ".join(by_kind)
            )
    return lines


def plot(phases: Sequence[Phase], path: Path, title: str) -> None:
    """Two panels: sagas/s against workers (a line per kind and in-flight count) and against
    sagas in flight (a line per kind and worker count)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {PLAIN: "tab:blue", SAGACITY: "tab:orange"}
    styles = ["-", "--", ":", "-."]
    fig, (by_workers, by_flight) = plt.subplots(1, 2, figsize=(11, 4.5))
    for axes, x_of, series_of, label in (
        (by_workers, "workers", "in_flight", "{} in flight"),
        (by_flight, "in_flight", "workers", "{} worker(s)"),
    ):
        series = sorted({getattr(p, series_of) for p in phases})
        for kind in KINDS:
            for j, value in enumerate(series):
                points = sorted(
                    (getattr(p, x_of), p.per_s)
                    for p in phases
                    if p.kind == kind and getattr(p, series_of) == value
                )
                axes.plot(
                    [x for x, _ in points], [y for _, y in points],
                    color=colours[kind], linestyle=styles[j % len(styles)], marker="o",
                    label=f"{kind}, {label.format(value)}",
                )  # fmt: skip
        axes.set_xlabel("worker processes" if x_of == "workers" else "sagas in flight")
        axes.set_ylabel("sagas/s")
        axes.set_xticks(sorted({getattr(p, x_of) for p in phases}))
        axes.set_ylim(bottom=0)
        axes.grid(alpha=0.3)
        axes.legend(fontsize="small")
    fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def report(stack: BenchStack, args: argparse.Namespace, phases: Sequence[Phase]) -> None:
    cores = os.cpu_count() or 1
    print(f"\n# Scale-out: Sagacity vs plain Temporal, N worker processes, {STEPS} trivial steps")
    print(f"machine: {machine()}")
    over = [n for n in args.workers if n > cores]
    if over:
        print(f"{', '.join(map(str, over))} workers overcommit the {cores} cores: beyond them the")
        print("workers, the client, Temporal and Postgres share the same CPUs")
    print(
        f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin}; a fresh "
        "Temporal server and journal database for each worker count"
    )
    print(
        "each Sagacity worker process: its own journal pool, checkpoints signed into one shared "
        "directory, payloads encrypted (AES-GCM codec), decisions checked against a keyring, its "
        "own transparency-log sequencer (every 10 s; one witness process cosigns)"
    )
    print(
        f"{args.workers} worker processes of each kind, all polling while either kind runs; "
        f"per kind and in-flight count {args.rounds} phase(s) of {args.warmup:g} s warm-up, then "
        f"{args.seconds:g} s measured, the kinds alternating; "
        + ("the last step fails (compensation)" if args.fail_last else "all steps succeed")
        + f"; journal pool {stack.settings.pool_min_size}-{stack.settings.pool_max_size} "
        "connections per worker\n"
    )
    print(table(HEADERS, rows(phases)))
    print(
        "\nCPU ms per saga: the worker processes (each, mean; and all of them), this process "
        "(the client), the Temporal server, the Postgres backends serving this run's database; "
        "what the Temporal server wrote to storage per saga (/proc/<pid>/io). "
        "Worker CPU %: each worker process's CPU time over the window (100 = one core). Lock "
        "waits: samples of pg_stat_activity every 0.2 s."
    )
    for line in scaling(phases):
        print(f"scaling, {line}")


# -- entry -------------------------------------------------------------------------------------


def counts(text: str) -> list[int]:
    """An argparse type: whole numbers of at least 1, comma-separated."""
    return [positive(part) for part in text.split(",") if part.strip()]


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.scale_out", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--workers", type=counts, default=[1, 2, 4], help="worker process counts (1,2,4)"
    )
    parser.add_argument(
        "--in-flight", type=counts, default=[10, 50], help="sagas in flight (10,50)"
    )
    parser.add_argument("--seconds", type=float, default=15.0, help="measured per phase (15)")
    parser.add_argument("--warmup", type=float, default=5.0, help="warm-up per phase, at least (5)")
    parser.add_argument(
        "--rounds", type=positive, default=1, help="phases per kind per in-flight count (1)"
    )
    parser.add_argument(
        "--temporal-dir",
        type=Path,
        help="where Temporal's database file goes (default: a temporary directory)",
    )
    parser.add_argument(
        "--temporal-in-memory",
        action="store_true",
        help="keep Temporal's state in memory instead (no persistence: to see what the file costs)",
    )
    parser.add_argument("--fail-last", action="store_true", help="the last step fails")
    parser.add_argument(
        "--plot", type=Path, default=DEFAULT_PLOT, help=f"the PNG to write ({DEFAULT_PLOT})"
    )
    parser.add_argument("--no-plot", action="store_true", help="write no PNG")
    parser.add_argument("--worker", help=argparse.SUPPRESS)  # a worker process's spec
    return parser.parse_args(argv)


async def main() -> int:
    args = parse()
    if args.worker:
        return await serve_worker(WorkerSpec(**json.loads(args.worker)))
    phases: list[Phase] = []
    with tempfile.TemporaryDirectory(prefix="sagacity-scale-") as scratch:
        for i, n in enumerate(args.workers):
            turn = i * len(args.in_flight) * args.rounds
            stack, of_n = await measure(n, args, Path(scratch), turn)
            phases += of_n
    report(stack, args, phases)
    if not args.no_plot:
        plot(phases, args.plot, f"Sagacity vs plain Temporal, {STEPS} steps/saga; {machine()}")
        print(f"\nplot: {args.plot}")
    return 0


if __name__ == "__main__":
    run(main)
