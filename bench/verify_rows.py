"""Verifying a large journal and its transparency log, against the same work done in memory.

Writes ``--rows`` rows (sagas of ``--saga-rows``) into a scratch database with COPY, their hashes
sealed by the journal core, and one signed checkpoint per saga head (a worker writes one per
append; each further line costs a little reading, but the check stays one signature per saga),
and vacuums it as autovacuum does an insert-only table. Then, each step timed alone with its
peak RSS (proofs in rows proven per second):

* verifies the whole journal the way ``sagacity verify --all`` does: rows streamed through a
  server-side cursor, each saga's chain recomputed, its head compared with its checkpoint;
* integrates every row into the transparency log with the real sequencer (one
  ``sagacity log integrate`` pass, signing a tree head into the temporary checkpoint folder with a
  generated Ed25519 key), then runs a second pass that finds nothing new (what a worker's
  sequencer pays every ``SAGACITY_LOG_INTERVAL`` once the log has caught up);
* runs the log verifier (``sagacity log verify``: the tree recomputed from the leaf table, every
  published head checked, every leaf against the journal, the journal's unlogged rows sought);
* proves ``--prove`` sagas spread over the journal with ``prove_saga`` (``sagacity prove``) and
  checks each bundle offline with :func:`~sagacity.evidence.proofs.check_proof_bundle`.

Baselines, in memory and in the same run: the pure verifier (``ChainVerifier``) and the pure
Merkle tree (leaf hashes appended to a ``Frontier``), fed the very same rows, timed apart from
generating them; for proofs, ``verify_inclusion`` over the very same proofs. Each ratio says what
Postgres, files and signatures cost on top of hashing. Peak RSS should not grow with ``--rows``.

Run from the repository root: ``python -m bench.verify_rows --rows 1000000``.
Measured 2026-12-03 on the development machine (x86_64, 2 cores, Python 3.11, Postgres on the
same host, other test suites beside it): the figures are in ``docs/evidence.md``, section Cost.
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import aclosing, contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg import sql

from bench._support import BenchStack, bench_stack, machine, positive, run, table
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.attest import Attestor
from sagacity.evidence.bundle import entry_from_line
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.logverify import LogVerifier
from sagacity.evidence.merkle import Frontier, leaf_data, leaf_hash, verify_inclusion
from sagacity.evidence.proofs import PROOFS, ROWS, ProofVerdict, RowProof, check_proof_bundle
from sagacity.evidence.tlog import HeadLog, Sequencer, prove_saga
from sagacity.journal import GENESIS_HASH, ChainVerifier, Draft, Entry, Phase, seal
from sagacity.store import JournalStore, open_pool
from sagacity.store.tlog import TlogStore

_COPY = (
    "COPY side_effect_journal (saga_id, seq, tool_name, phase, input, payload, timestamp, hash)"
    " FROM STDIN"
)
_START = datetime(2026, 1, 1, tzinfo=UTC)


def saga_id_of(saga: int) -> str:
    return f"bench-{saga:07d}"


def saga_rows(saga: int, count: int) -> Iterator[Entry]:
    """One saga's rows: tool calls with typical JSON input and result, sealed as the store does."""
    saga_id = saga_id_of(saga)
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


@dataclass
class Step:
    """One measured step: items done, seconds, RSS before and peak RSS during it (KiB)."""

    count: int = 0
    seconds: float = math.nan
    before: int = 0
    peak: int = 0


@contextmanager
def measured() -> Iterator[Step]:
    """Time the body and take its peak RSS; the caller sets ``count``."""
    step = Step(before=rss_kib("VmRSS"))
    if not reset_peak_rss():
        print("(peak RSS cannot be reset here: it includes the steps before)")
    started = time.perf_counter()
    yield step
    step.seconds = time.perf_counter() - started
    step.peak = rss_kib("VmHWM")


@dataclass
class Loaded:
    """What :func:`load` wrote, and how long hashing the same rows in memory took."""

    rows: int
    sagas: int
    insert_s: float
    pure_chain_s: float
    pure_merkle_s: float
    #: the root the log must reach: the same rows' Merkle tree, built in memory
    root: bytes


async def load(stack: BenchStack, args: argparse.Namespace, writer: CheckpointWriter) -> Loaded:
    """Insert the rows, and time both pure baselines on them."""
    rows = sagas = 0
    pure_chain_s = pure_merkle_s = 0.0
    frontier = Frontier()
    started = time.perf_counter()
    async with (
        await open_pool(stack.database_url, max_size=1) as pool,
        pool.connection() as conn,
        conn.cursor() as cur,
        cur.copy(_COPY) as copy,
    ):
        while rows < args.rows:
            count = min(args.saga_rows, args.rows - rows)
            entries = list(saga_rows(sagas, count))
            verifier = ChainVerifier(entries[0].saga_id)
            tick = time.perf_counter()
            for entry in entries:
                verifier.feed(entry)
            pure_chain_s += time.perf_counter() - tick
            assert verifier.verdict().ok
            tick = time.perf_counter()
            for entry in entries:  # the log's order is the rows' (timestamp, saga, seq)
                frontier.append(leaf_hash(leaf_data(entry.saga_id, entry.seq, entry.hash)))
            pure_merkle_s += time.perf_counter() - tick
            for e in entries:
                row = (e.saga_id, e.seq, e.tool_name, e.phase.value, e.input, e.payload,
                       e.timestamp.replace(tzinfo=None), e.hash)  # fmt: skip
                await copy.write_row(row)
            writer.record(entries[-1].saga_id, entries[-1].seq, entries[-1].hash)
            rows += count
            sagas += 1
    await settle(stack, "side_effect_journal")
    elapsed = time.perf_counter() - started
    return Loaded(rows, sagas, elapsed, pure_chain_s, pure_merkle_s, frontier.root())


async def settle(stack: BenchStack, *tables: str) -> None:
    """``VACUUM (ANALYZE)`` the tables, as autovacuum does to insert-only tables: pages marked
    all-visible let the log's anti-join read the (saga_id, seq) indexes alone."""
    async with await open_pool(stack.database_url, max_size=1) as pool, pool.connection() as conn:
        for name in tables:
            await conn.execute(sql.SQL("VACUUM (ANALYZE) {}").format(sql.Identifier(name)))


async def verify(stack: BenchStack, checkpoints: CheckpointDir | None) -> Step:
    """Verify every saga as ``sagacity verify --all`` does; ``count`` is the rows seen."""
    pool = await open_pool(stack.database_url, max_size=2)
    try:
        journal = JournalStore(pool)
        with measured() as step:
            async with aclosing(verify_journal(journal, checkpoints=checkpoints)) as reports:
                async for report in reports:
                    step.count += report.verdict.rows
                    assert report.ok, report
        return step
    finally:
        await pool.close()


async def integrate(
    stack: BenchStack, folder: Path, key: Ed25519PrivateKey, root: bytes | None
) -> Step:
    """One sequencer pass, as ``sagacity log integrate``; ``count`` is the rows appended.

    ``root``: the root the published head must have; None: the pass must find nothing new.
    """
    # the pass holds three connections: the sequencer lock, the pending rows' cursor, appends
    pool = await open_pool(stack.database_url, max_size=3)
    try:
        sequencer = Sequencer(TlogStore(pool), folder, key)
        with measured() as step:
            done = await sequencer.integrate()
            step.count = done.appended
        if root is None:
            assert done.published is None and done.appended == 0, done
        else:
            assert done.published is not None and done.published.root == root, done
        return step
    finally:
        await pool.close()


async def log_verify(stack: BenchStack, heads: HeadLog) -> Step:
    """The whole log against its heads and the journal, as ``sagacity log verify``; ``count``
    is the leaves checked."""
    pool = await open_pool(stack.database_url, max_size=2)
    try:
        attestor = Attestor(JournalStore(pool), CheckpointDir(heads.path.parent, heads.key))
        checker = LogVerifier(TlogStore(pool), heads, attestor)
        with measured() as step:
            async with aclosing(checker.run()) as findings:
                async for finding in findings:
                    raise AssertionError(finding.line())
            step.count = checker.leaves
        assert checker.unlogged == 0 and checker.checked_heads >= 1, checker
        return step
    finally:
        await pool.close()


@dataclass
class Proving:
    """Proving ``sagas`` sagas: writing their bundles, checking them offline, and the proofs'
    check alone in memory (each step's ``count`` is rows proven), with the proofs' lengths."""

    sagas: int
    prove: Step
    check: Step
    pure_s: float
    hashes: list[int]


async def prove(stack: BenchStack, folder: Path, heads: HeadLog, sagas: Sequence[int]) -> Proving:
    """``prove_saga`` for each of ``sagas`` into ``folder``, then each bundle checked offline."""
    outs = [(saga_id_of(saga), folder / saga_id_of(saga)) for saga in sagas]
    pool = await open_pool(stack.database_url, max_size=2)
    try:
        journal, store = JournalStore(pool), TlogStore(pool)
        with measured() as proving:
            for saga_id, out in outs:
                proving.count += (await prove_saga(journal, store, heads, saga_id, out)).rows
    finally:
        await pool.close()
    with measured() as checking:
        for _, out in outs:
            report = check_proof_bundle(out, heads.key)
            assert report.verdict is ProofVerdict.VERIFIED, report.problems
            checking.count += report.rows
    # the baseline: the very same inclusion proofs, checked from memory
    latest = heads.latest()
    assert latest is not None
    size, root = latest.head.size, latest.head.root
    proofs = []
    for _, out in outs:
        rows = (out / ROWS).read_text(encoding="utf-8").splitlines()
        lines = (out / PROOFS).read_text(encoding="utf-8").splitlines()
        proofs += [
            (entry_from_line(r), RowProof.parse(p)[0]) for r, p in zip(rows, lines, strict=True)
        ]
    tick = time.perf_counter()
    for row, proof in proofs:
        leaf = leaf_hash(leaf_data(row.saga_id, row.seq, row.hash))
        assert verify_inclusion(leaf, proof.index, size, proof.hashes, root)
    pure_s = time.perf_counter() - tick
    return Proving(len(outs), proving, checking, pure_s, [len(proof.hashes) for _, proof in proofs])


def spread(sagas: int, count: int) -> list[int]:
    """``count`` saga numbers evenly spread from the first saga to the last."""
    if count >= sagas:
        return list(range(sagas))
    if count == 1:
        return [0]
    return sorted({round(i * (sagas - 1) / (count - 1)) for i in range(count)})


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.verify_rows", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--rows", type=int, default=100_000, help="journal rows (100000)")
    parser.add_argument("--saga-rows", type=int, default=50, help="rows per saga (50)")
    parser.add_argument("--prove", type=positive, default=100, help="sagas to prove (100)")
    return parser.parse_args(argv)


def _pure(name: str, rows: int, seconds: float) -> list[object]:
    return [name, f"{rows / seconds:,.0f}", "1.00", f"{seconds:,.2f}", "", ""]


def _line(name: str, rows: int, step: Step, pure_rate: float | None) -> list[object]:
    rate = rows / step.seconds
    ratio = "" if pure_rate is None else f"{rate / pure_rate:.2f}"
    return [name, f"{rate:,.0f}", ratio, f"{step.seconds:,.2f}",
            f"{step.before / 1024:,.0f}", f"{step.peak / 1024:,.0f}"]  # fmt: skip


async def main() -> int:
    args = parse()
    async with bench_stack(temporal=False) as stack:
        with tempfile.TemporaryDirectory(prefix="sagacity-bench-") as name:
            folder = Path(name)
            key = Ed25519PrivateKey.generate()
            writer = CheckpointWriter(folder, key)
            loaded = await load(stack, args, writer)
            chain = await verify(stack, None)
            anchored = await verify(stack, CheckpointDir(writer.path, key.public_key()))
            logged = await integrate(stack, folder, key, loaded.root)
            await settle(stack, "sagacity_tlog_leaf", "sagacity_tlog_node")
            caught_up = await integrate(stack, folder, key, None)
            heads = HeadLog(folder, key.public_key())
            log_checked = await log_verify(stack, heads)
            proving = await prove(stack, folder / "proofs", heads, spread(loaded.sagas, args.prove))
    rows = loaded.rows
    print(f"\n# Verifying {rows:,} rows ({loaded.sagas:,} sagas of {args.saga_rows}) and their log")
    print(f"machine: {machine()}; Postgres: {stack.postgres_origin}")
    print(f"inserted with COPY in {loaded.insert_s:.1f} s ({rows / loaded.insert_s:,.0f} rows/s)\n")
    for step in (chain, anchored, logged, log_checked):
        assert step.count == rows, (step, rows)
    chain_rate = rows / loaded.pure_chain_s
    merkle_rate = rows / loaded.pure_merkle_s
    proven = proving.prove.count
    proof_rate = proven / proving.pure_s
    lines: list[list[object]] = [
        _pure("pure ChainVerifier, rows in memory", rows, loaded.pure_chain_s),
        _line("Postgres stream, chain only", rows, chain, chain_rate),
        _line("Postgres stream + signed checkpoints", rows, anchored, chain_rate),
        _pure("pure Merkle tree (leaves, frontier), in memory", rows, loaded.pure_merkle_s),
        _line("log integrate: every row appended, head signed", rows, logged, merkle_rate),
        _line("log integrate again, nothing new: rows scanned", rows, caught_up, None),
        _line("log verify: tree, heads, leaves vs journal", rows, log_checked, merkle_rate),
        _pure(f"pure verify_inclusion, {proven:,} proofs in memory", proven, proving.pure_s),
        _line(f"prove_saga, {proving.sagas} sagas", proven, proving.prove, proof_rate),
        _line("check_proof_bundle, offline, trusted key", proven, proving.check, proof_rate),
    ]  # fmt: skip
    headers = ["step", "rows/s", "x pure", "s", "RSS before (MiB)", "peak RSS (MiB)"]
    print(table(headers, lines))
    mean = sum(proving.hashes) / len(proving.hashes)
    print(
        f"\nproof size: {mean:.1f} hashes on average, {max(proving.hashes)} at most "
        f"(log2 of {rows:,} leaves: {math.log2(rows):.1f}); each ratio is against the pure "
        "line above it"
    )
    return 0


if __name__ == "__main__":
    run(main)
