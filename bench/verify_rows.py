"""Streaming verification of a large journal, against hashing the same rows in memory.

Writes ``--rows`` rows (sagas of ``--saga-rows``) into a scratch database with COPY, their hashes
sealed by the journal core, and one signed checkpoint per saga head (a worker writes one per
append; each further line costs a little reading, but the check stays one signature per saga).
Then it verifies the whole journal the way ``sagacity verify --all`` does: rows streamed through
a server-side cursor, each saga's chain recomputed, its head compared with its checkpoint.

Baseline: the pure verifier (``ChainVerifier``) fed the very same rows from memory, timed apart
from generating them. The ratio says what reading rows out of Postgres costs on top of hashing.
Peak RSS is measured over the verification alone and should not grow with ``--rows``.

Run from the repository root: ``python -m bench.verify_rows --rows 1000000``.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from bench._support import BenchStack, bench_stack, machine, run, table
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.journal import GENESIS_HASH, ChainVerifier, Draft, Entry, Phase, seal
from sagacity.store import JournalStore, open_pool

_COPY = (
    "COPY side_effect_journal (saga_id, seq, tool_name, phase, input, payload, timestamp, hash)"
    " FROM STDIN"
)
_START = datetime(2026, 1, 1, tzinfo=UTC)


def saga_rows(saga: int, count: int) -> Iterator[Entry]:
    """One saga's rows: tool calls with typical JSON input and result, sealed as the store does."""
    saga_id = f"bench-{saga:07d}"
    prev = GENESIS_HASH
    for seq in range(1, count + 1):
        phase = Phase.INTENT if seq % 2 else Phase.EXECUTED
        args = f'{{"order_id":"ord-{saga}","product_id":"p-{seq % 7}","quantity":{seq}}}'
        held = f'{{"reservation_id":"res-{saga}-{seq}","status":"held"}}'
        result = held if seq % 2 == 0 else ""
        draft = Draft(saga_id, "reserve_inventory", phase, args, result)
        at = _START + timedelta(seconds=saga, microseconds=seq)
        entry = seal(draft, seq=seq, prev_hash=prev, timestamp=at)
        prev = entry.hash
        yield entry


def rss_kib(field: str) -> int:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in KiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(field)


def reset_peak_rss() -> bool:
    """Start peak-RSS accounting afresh (Linux: clear_refs 5); False when not possible."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def load(
    stack: BenchStack, args: argparse.Namespace, writer: CheckpointWriter
) -> tuple[int, int, float, float]:
    """Insert the rows; return (rows, sagas, insert seconds, pure-verify seconds)."""
    rows = sagas = 0
    pure_s = 0.0
    started = time.perf_counter()
    async with await open_pool(stack.database_url, max_size=1) as pool, pool.connection() as conn:
        async with conn.cursor() as cur, cur.copy(_COPY) as copy:
            while rows < args.rows:
                count = min(args.saga_rows, args.rows - rows)
                entries = list(saga_rows(sagas, count))
                verifier = ChainVerifier(entries[0].saga_id)
                tick = time.perf_counter()
                for entry in entries:
                    verifier.feed(entry)
                pure_s += time.perf_counter() - tick
                assert verifier.verdict().ok
                for e in entries:
                    row = (e.saga_id, e.seq, e.tool_name, e.phase.value, e.input, e.payload,
                           e.timestamp.replace(tzinfo=None), e.hash)  # fmt: skip
                    await copy.write_row(row)
                writer.record(entries[-1].saga_id, entries[-1].seq, entries[-1].hash)
                rows += count
                sagas += 1
        await conn.execute("ANALYZE side_effect_journal")
    return rows, sagas, time.perf_counter() - started, pure_s


async def verify(
    stack: BenchStack, checkpoints: CheckpointDir | None
) -> tuple[int, int, float, int, int]:
    """Verify every saga; return (rows, failures, seconds, RSS before, peak RSS during) in KiB."""
    pool = await open_pool(stack.database_url, max_size=2)
    try:
        journal = JournalStore(pool)
        before = rss_kib("VmRSS")
        if not reset_peak_rss():
            print("(peak RSS cannot be reset here: it includes loading the rows)")
        rows = failures = 0
        started = time.perf_counter()
        async with aclosing(verify_journal(journal, checkpoints=checkpoints)) as reports:
            async for report in reports:
                rows += report.verdict.rows
                failures += not report.ok
        return rows, failures, time.perf_counter() - started, before, rss_kib("VmHWM")
    finally:
        await pool.close()


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.verify_rows", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=100_000, help="journal rows (100000)")
    parser.add_argument("--saga-rows", type=int, default=50, help="rows per saga (50)")
    return parser.parse_args(argv)


async def main() -> int:
    args = parse()
    async with bench_stack(temporal=False) as stack:
        with tempfile.TemporaryDirectory(prefix="sagacity-bench-") as folder:
            writer = CheckpointWriter(Path(folder), Ed25519PrivateKey.generate())
            reader = CheckpointDir(writer.path, writer.key.public_key())
            rows, sagas, insert_s, pure_s = await load(stack, args, writer)
            chain = await verify(stack, None)
            anchored = await verify(stack, reader)
    pure_rate = rows / pure_s
    print(f"\n# Streaming verification of {rows:,} rows ({sagas:,} sagas of {args.saga_rows})")
    print(f"machine: {machine()}; Postgres: {stack.postgres_origin}")
    print(f"inserted with COPY in {insert_s:.1f} s ({rows / insert_s:,.0f} rows/s)\n")
    lines = [["pure ChainVerifier, rows in memory", f"{pure_rate:,.0f}", "1.00", "", ""]]
    for name, (seen, failures, seconds, before, peak) in (
        ("Postgres stream, chain only", chain),
        ("Postgres stream + signed checkpoints", anchored),
    ):
        assert seen == rows and failures == 0, (seen, failures)
        rate = rows / seconds
        lines.append(
            [name, f"{rate:,.0f}", f"{rate / pure_rate:.2f}", f"{before / 1024:,.0f}",
             f"{peak / 1024:,.0f}"]
        )  # fmt: skip
    print(table(["verification", "rows/s", "x pure", "RSS before (MiB)", "peak RSS (MiB)"], lines))
    return 0


if __name__ == "__main__":
    run(main)
