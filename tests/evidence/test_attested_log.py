"""The transparency log admits only attested rows, and names forged and backdated ones.

Real Postgres, a database per test (``log_db``): legitimate rows are written as a worker writes
them (each call's outcome checkpointed with the log's key); forged rows are inserted as the
application role, which may INSERT any row, with hashes chained by the rules.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from typer.testing import CliRunner

from sagacity.cli.main import app
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.attest import Attestor
from sagacity.evidence.checkpoints import Checkpoint, CheckpointDir, CheckpointWriter
from sagacity.evidence.keys import load_private_key
from sagacity.evidence.logcheck import LogAnchor
from sagacity.evidence.logverify import LogFinding
from sagacity.evidence.report import Source
from sagacity.evidence.tlog import HeadLog, run_sequencer
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, entry_hash
from sagacity.store import JournalStore, open_pool
from sagacity.store.journal import read_spans
from sagacity.store.tlog import TlogStore
from tests.evidence.test_tlog import (
    LogDb,
    findings,
    latest_size,
    load_public,
    log_db,
    owner_sql,
    sequencer,
    write_sagas,
)

__all__ = ["log_db"]  # the fixture, imported for pytest

UNATTESTED = "unattested: no signed checkpoint covers it: forged, or written behind Sagacity's back"


def chained(saga_id: str, rows: list[tuple[Phase, datetime]]) -> list[Entry]:
    """Rows of ``saga_id`` from seq 1, at the given times, hashed by the rules."""
    out, prev = [], GENESIS_HASH
    for seq, (phase, at) in enumerate(rows, start=1):
        draft = Entry(saga_id, seq, "pay", phase, '{"amount": 1}', "", at, "")
        prev = entry_hash(prev, draft)
        out.append(Entry(saga_id, seq, "pay", phase, draft.input, "", at, prev))
    return out


async def insert_as_app(db: LogDb, rows: list[Entry]) -> None:
    """What any holder of the application login can do: INSERT rows of its choosing."""
    async with await psycopg.AsyncConnection.connect(db.app_url, autocommit=True) as conn:
        for r in rows:
            await conn.execute(
                "INSERT INTO side_effect_journal VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    r.saga_id,
                    r.seq,
                    r.tool_name,
                    r.phase.value,
                    r.input,
                    r.payload,
                    r.timestamp.replace(tzinfo=None),
                    r.hash,
                ),
            )


async def logged(db: LogDb, saga_id: str) -> list[int]:
    async with await psycopg.AsyncConnection.connect(db.app_url) as conn:
        cur = await conn.execute(
            "SELECT seq FROM sagacity_tlog_leaf WHERE saga_id = %s ORDER BY seq", (saga_id,)
        )
        return [seq for (seq,) in await cur.fetchall()]


def about(found: list[LogFinding], saga_id: str) -> list[tuple[bool, int | None, str]]:
    return [(f.fatal, f.seq, f.detail) for f in found if f.saga_id == saga_id]


async def test_a_forged_backdated_saga_is_not_logged_and_named_forged(log_db: LogDb) -> None:
    tag = uuid.uuid4().hex[:6]
    real, forged = f"real-{tag}", f"forged-{tag}"
    await write_sagas(log_db, [real])
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        seq = sequencer(store, log_db)
        assert (await seq.integrate()).appended == 4
        a_day_ago = datetime.now(UTC) - timedelta(days=1)
        await insert_as_app(
            log_db, chained(forged, [(Phase.INTENT, a_day_ago), (Phase.EXECUTED, a_day_ago)])
        )
        await write_sagas(log_db, [f"later-{tag}"], calls=1)

        done = await seq.integrate()
        # the legitimate saga written after the forgery is logged; the forgery is not
        assert (done.appended, done.unattested, done.waiting) == (2, 2, 0)
        assert [(r.saga_id, r.seq) for r in done.named] == [(forged, 1), (forged, 2)]
        assert await logged(log_db, forged) == []
        assert await logged(log_db, f"later-{tag}") == [1, 2]

        found = about(await findings(store, log_db), forged)
        assert [(fatal, s) for fatal, s, _ in found] == [(True, 1), (True, 2)]
        assert all(detail.startswith(UNATTESTED) for _, _, detail in found), found
        assert [f for f in await findings(store, log_db) if f.fatal and f.saga_id != forged] == []
    finally:
        await pool.close()


async def test_a_forged_row_dated_now_waits_out_the_grace_then_is_refused(log_db: LogDb) -> None:
    forged = f"now-{uuid.uuid4().hex[:6]}"
    grace = timedelta(seconds=1)
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        seq = sequencer(store, log_db, grace=grace)
        await seq.integrate()
        now = datetime.now(UTC)
        await insert_as_app(log_db, chained(forged, [(Phase.INTENT, now)]))

        within = await seq.integrate()
        assert (within.appended, within.waiting, within.unattested) == (0, 1, 0)
        assert about(await findings(store, log_db, grace), forged) == [
            (
                False,
                1,
                "not in the log yet (pending integration): no signed checkpoint covers it yet",
            )
        ]
        await asyncio.sleep(1.2)
        past = await seq.integrate()
        assert (past.appended, past.waiting, past.unattested) == (0, 0, 1)
        ((fatal, at, detail),) = about(await findings(store, log_db, grace), forged)
        assert (fatal, at) == (True, 1) and detail.startswith(UNATTESTED), detail
        assert await logged(log_db, forged) == []
    finally:
        await pool.close()


async def test_a_running_call_waits_for_its_checkpoint_and_does_not_block_others(
    log_db: LogDb,
) -> None:
    tag = uuid.uuid4().hex[:6]
    running, other = f"running-{tag}", f"other-{tag}"
    grace = timedelta(seconds=1)
    writer = CheckpointWriter(log_db.checkpoints, load_private_key(log_db.signing_key))
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        seq = sequencer(store, log_db, grace=grace)
        journal = JournalStore(pool)
        # a worker between a call's INTENT and its outcome: no checkpoint covers INTENT yet
        intent = await journal.append(Draft(running, "pay", Phase.INTENT, '{"amount": 1}'))
        await write_sagas(log_db, [other], calls=1)  # written after it, checkpointed
        first = await seq.integrate()
        assert (first.appended, first.waiting) == (2, 1)
        assert await logged(log_db, other) == [1, 2]
        assert await logged(log_db, running) == []

        # the call outlasts the grace period: named as unattested, still not logged
        await asyncio.sleep(1.2)
        late = await seq.integrate()
        assert [(r.saga_id, r.seq) for r in late.named] == [(running, 1)]

        # its outcome and the outcome's checkpoint arrive: both rows go in, in one head
        outcome = await journal.append(
            Draft(running, "pay", Phase.EXECUTED, intent.input, '{"id": "tx"}')
        )
        writer.record(running, outcome.seq, outcome.hash)
        done = await seq.integrate()
        assert (done.appended, done.unattested, done.waiting) == (2, 0, 0)
        assert await logged(log_db, running) == [1, 2]
        assert [f.line() for f in await findings(store, log_db, grace) if f.fatal] == []
    finally:
        await pool.close()


async def test_a_backdated_saga_signed_by_the_key_holder_is_named_backdated(
    log_db: LogDb,
) -> None:
    tag = uuid.uuid4().hex[:6]
    backdated, slow = f"backdated-{tag}", f"slow-{tag}"
    writer = CheckpointWriter(log_db.checkpoints, load_private_key(log_db.signing_key))
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        seq = sequencer(store, log_db)
        await write_sagas(log_db, [f"real-{tag}"])
        before = await seq.integrate()
        assert before.published is not None
        # an insider holding the signing key forges a saga dated yesterday and checkpoints it
        a_day_ago = datetime.now(UTC) - timedelta(days=1)
        rows = chained(backdated, [(Phase.INTENT, a_day_ago), (Phase.EXECUTED, a_day_ago)])
        await insert_as_app(log_db, rows)
        writer.record(backdated, 2, rows[1].hash)
        # a call that legitimately outlasted the grace period: INTENT 20 minutes old, its
        # outcome (which its checkpoint covers) written now
        now = datetime.now(UTC)
        calls = chained(slow, [(Phase.INTENT, now - timedelta(minutes=20)), (Phase.EXECUTED, now)])
        await insert_as_app(log_db, calls)
        writer.record(slow, 2, calls[1].hash)

        done = await seq.integrate()
        assert done.appended == 4 and done.published is not None
        found = await findings(store, log_db)
        assert about(found, slow) == []
        named = about(found, backdated)
        assert [(fatal, s) for fatal, s, _ in named] == [(True, 1), (True, 2)], named
        for _, _, detail in named:
            assert detail.startswith(
                f"backdated: written {rows[0].timestamp.strftime('%Y-%m-%dT%H:%M:%S.%fZ')} "
                f"but first logged in tree head {done.size}, published "
            ), detail
            assert f"tree head {before.size}, published " in detail
    finally:
        await pool.close()


def test_log_integrate_names_unattested_rows(log_db: LogDb) -> None:
    forged = f"cli-forged-{uuid.uuid4().hex[:6]}"
    a_day_ago = datetime.now(UTC) - timedelta(days=1)
    asyncio.run(write_sagas(log_db, [f"cli-real-{forged}"], calls=1))
    asyncio.run(insert_as_app(log_db, chained(forged, [(Phase.INTENT, a_day_ago)])))
    env = {
        "SAGACITY_DATABASE_URL": log_db.app_url,
        "SAGACITY_CHECKPOINT_DIR": str(log_db.checkpoints),
        "SAGACITY_SIGNING_KEY": str(log_db.signing_key),
        "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(log_db.public_key),
    }
    runner = CliRunner()
    result = runner.invoke(app, ["log", "integrate"], env=env)
    assert result.exit_code == 1, result.output
    assert result.stdout == (
        f"FAILED  saga {forged!r} seq 1: not logged: {UNATTESTED}\n"
        "2 rows appended; published tree head 2\n"
    )
    result = runner.invoke(app, ["log", "integrate", "--json"], env=env)
    assert json.loads(result.stdout)["named"] == [{"saga_id": forged, "seq": 1}]
    result = runner.invoke(app, ["log", "verify"], env=env)
    assert result.exit_code == 1
    assert f"FAILED  saga {forged!r} seq 1: {UNATTESTED} (written " in result.stdout


async def test_rows_retention_purged_are_not_reported_deleted(log_db: LogDb) -> None:
    tag = uuid.uuid4().hex[:6]
    purged, deleted = f"purged-{tag}", f"deleted-{tag}"
    rows = await write_sagas(log_db, [purged, deleted])
    writer = CheckpointWriter(log_db.checkpoints, load_private_key(log_db.signing_key))
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        assert (await sequencer(store, log_db).integrate()).appended == 8
        # retention signs `purged` before its rows go; the other saga is deleted by an attacker
        head = [r for r in rows if r.saga_id == purged][-1]
        writer.purged(purged, head.seq, head.hash, "0" * 64)
        await owner_sql(
            log_db,
            ("DELETE FROM side_effect_journal WHERE saga_id = ANY(%s)", ([purged, deleted],)),
        )

        found = [(f.saga_id, f.seq, f.kind) for f in await findings(store, log_db) if f.fatal]
        assert found == [(deleted, n, "deleted") for n in (1, 2, 3, 4)]
        # verify, every saga and named ones, through the log anchor
        journal = JournalStore(pool)
        public = load_public(log_db)
        checkpoints = CheckpointDir(log_db.checkpoints, public)
        for saga_ids in (None, [purged, deleted]):
            log = LogAnchor(
                store,
                HeadLog(log_db.checkpoints, public),
                Attestor(journal, checkpoints),
            )
            reports = {
                r.saga_id: r
                async for r in verify_journal(
                    journal, saga_ids=saga_ids, checkpoints=checkpoints, log=log
                )
            }
            assert reports[purged].ok, reports[purged]
            faults = [(c.source, c.seq) for c in reports[deleted].faults()]
            assert (Source.LOG, 1) in faults and (Source.LOG, 4) in faults, faults
            assert log.problems == []
    finally:
        await pool.close()


async def test_leaves_edited_to_match_a_rewrite_are_caught_by_the_log_check(
    log_db: LogDb,
) -> None:
    """The owner rewrites a saga and puts the new hashes in its leaves too (the stored tree left
    as it was): named sagas prove each leaf in the latest head, every saga recomputes it."""
    saga_id = f"leafy-{uuid.uuid4().hex[:6]}"
    rows = await write_sagas(log_db, [saga_id])
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        assert (await sequencer(store, log_db).integrate()).appended == 4
        forged = chained(saga_id, [(Phase.INTENT, r.timestamp) for r in rows])
        await owner_sql(
            log_db,
            ("DELETE FROM side_effect_journal WHERE saga_id = %s", (saga_id,)),
            *[
                (
                    "UPDATE sagacity_tlog_leaf SET row_hash = %s WHERE saga_id = %s AND seq = %s",
                    (r.hash, saga_id, r.seq),
                )
                for r in forged
            ],
        )
        await insert_as_app(log_db, forged)

        journal = JournalStore(pool)
        public = load_public(log_db)
        checkpoints = CheckpointDir(log_db.checkpoints, public)
        named = LogAnchor(
            store, HeadLog(log_db.checkpoints, public), Attestor(journal, checkpoints)
        )
        checks = await named.check(saga_id)
        assert [(c.seq, c.fatal) for c in checks] == [(n, True) for n in (1, 2, 3, 4)], checks
        assert all("is not the one tree head 4 holds" in c.detail for c in checks), checks

        every = LogAnchor(
            store, HeadLog(log_db.checkpoints, public), Attestor(journal, checkpoints)
        )
        await every.scan()
        checks = await every.check(saga_id)
        assert [c.seq for c in checks if c.fatal] == [1, 2, 3, 4], checks
        assert "the leaf table and the stored tree disagree" in checks[0].detail
    finally:
        await pool.close()


async def test_the_workers_sequencer_logs_unattested_rows_once(
    log_db: LogDb, caplog: pytest.LogCaptureFixture
) -> None:
    forged = f"bg-forged-{uuid.uuid4().hex[:6]}"
    a_day_ago = datetime.now(UTC) - timedelta(days=1)
    await insert_as_app(log_db, chained(forged, [(Phase.INTENT, a_day_ago)]))
    await write_sagas(log_db, [f"bg-real-{forged}"], calls=1)
    caplog.set_level(logging.ERROR, logger="sagacity.evidence.tlog")
    task = asyncio.create_task(
        run_sequencer(log_db.app_url, log_db.checkpoints, log_db.signing_key, every=0.05)
    )
    try:
        for _ in range(200):
            if latest_size(log_db) == 2:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # a few more passes, finding the same
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert latest_size(log_db) == 2  # the real saga's two rows, not the forged one
    said = [r.getMessage() for r in caplog.records if forged in r.getMessage()]
    assert said == [f"transparency log: saga {forged!r} seq 1 not logged: {UNATTESTED}"]


async def test_one_pass_attests_long_short_and_edited_sagas_as_each_alone(log_db: LogDb) -> None:
    """A pass attests its sagas together (short chains in one read of the journal, a long one
    on its own): a long saga's 300 rows and a short one's go in, and the short one's next call
    in the next pass. In a saga whose row 2 was edited behind Sagacity's back, rows 3 and 4 chain
    to the checkpoint at 4 from row 2's stored hash and go in; row 2 does not hash as stored,
    and row 1 has no checkpoint but through it: both stay out."""
    tag = uuid.uuid4().hex[:6]
    long, short, edited = f"long-{tag}", f"short-{tag}", f"edited-{tag}"
    await write_sagas(log_db, [long], calls=150)  # past the span read together
    await write_sagas(log_db, [short, edited])
    await owner_sql(
        log_db,
        (
            "UPDATE side_effect_journal SET input = %s WHERE saga_id = %s AND seq = 2",
            ('{"amount": 1000, "to": "Zoë"}', edited),
        ),
    )
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        seq = sequencer(TlogStore(pool), log_db)
        done = await seq.integrate()
        assert (done.appended, done.waiting, done.unattested) == (306, 2, 0)
        assert await logged(log_db, long) == list(range(1, 301))
        assert await logged(log_db, short) == [1, 2, 3, 4]
        assert await logged(log_db, edited) == [3, 4]
        # a call after the pass: its chain is walked on from row 4, logged by the last pass
        await write_sagas(log_db, [short], calls=1)
        later = await seq.integrate()
        assert (later.appended, later.waiting) == (2, 2)
        assert await logged(log_db, short) == [1, 2, 3, 4, 5, 6]
    finally:
        await pool.close()


async def test_an_edited_row_dated_after_its_successors_keeps_only_itself_out(
    log_db: LogDb,
) -> None:
    """Workers' clocks differ: a call's INTENT dated 30 s after its outcome and the next call.
    An insider then edits that INTENT. The sequencer, reading rows by timestamp, asks about
    rows 4, 5, 6 before row 3: they chain to the checkpoint at 6 from row 3's stored hash and
    are logged; row 3 alone does not verify and is named (a pass that walked every row from 3
    refused them all, and the verifier then called them withheld)."""
    saga = f"skewed-{uuid.uuid4().hex[:6]}"
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        await write_sagas(log_db, [saga], calls=1)  # rows 1, 2
        seq = sequencer(TlogStore(pool), log_db, grace=timedelta(0))
        await seq.integrate()
        writer = CheckpointWriter(log_db.checkpoints, load_private_key(log_db.signing_key))
        now = datetime.now(UTC)
        async with await JournalStore.open(log_db.app_url, max_size=2) as journal:
            intent = Draft(saga, "pay", Phase.INTENT, '{"n": 3}')
            await journal.append_at(intent, seq=3, timestamp=now + timedelta(seconds=30))
            outcome = Draft(saga, "pay", Phase.EXECUTED, '{"n": 3}', '{"ok": 1}')
            row = await journal.append_at(outcome, seq=4, timestamp=now)
            writer.record(saga, 4, row.hash)
        await write_sagas(log_db, [saga], calls=1)  # rows 5, 6, checkpoint at 6
        await owner_sql(
            log_db,
            (
                "UPDATE side_effect_journal SET input = %s WHERE saga_id = %s AND seq = 3",
                ('{"n": 300}', saga),
            ),
        )
        done = await seq.integrate()
        assert [(r.saga_id, r.seq) for r in done.named] == [(saga, 3)]
        assert await logged(log_db, saga) == [1, 2, 4, 5, 6]
        found = about(await findings(TlogStore(pool), log_db, timedelta(0)), saga)
        assert [(fatal, at) for fatal, at, _ in found] == [(True, 3)], found
        assert found[0][2].startswith(UNATTESTED), found
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("group_rows", "ahead_rows", "reads"),
    [
        (128, 10_000, [("spans", 40)]),  # one query for the batch
        (10, 10_000, [("spans", 5)] * 8),  # about so many rows a query
        (10, 20, [("spans", 5)] * 2 + [("after", 1)] * 30),  # past the batch's hold: per saga
    ],
)
async def test_a_pass_reads_its_short_sagas_ahead_together_within_bounds(
    log_db: LogDb,
    monkeypatch: pytest.MonkeyPatch,
    group_rows: int,
    ahead_rows: int,
    reads: list[tuple[str, int]],
) -> None:
    """The sequencer runs beside the worker's tool calls: a pass over 40 sagas of two rows reads
    their rows up to their checkpoints together, not in a query a saga, holding a bounded number
    of rows at once."""
    monkeypatch.setattr("sagacity.evidence.attest._GROUP_ROWS", group_rows)
    monkeypatch.setattr("sagacity.evidence.attest._AHEAD_ROWS", ahead_rows)
    tag = uuid.uuid4().hex[:6]
    await write_sagas(log_db, [f"many-{tag}-{n:02d}" for n in range(40)], calls=1)
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        seq = sequencer(TlogStore(pool), log_db)
        journal = seq.attestor._journal
        asked: list[tuple[str, int]] = []
        for name in ("after", "read", "stream"):
            method = getattr(journal, name)

            def counted(*args: object, _m: Any = method, _n: str = name, **kw: object) -> Any:
                asked.append((_n, 1))
                return _m(*args, **kw)

            monkeypatch.setattr(journal, name, counted)
        ahead = read_spans

        async def read_ahead(pool: Any, wanted: dict[str, Any]) -> Any:
            asked.append(("spans", len(wanted)))
            return await ahead(pool, wanted)

        monkeypatch.setattr("sagacity.evidence.attest.read_spans", read_ahead)
        done = await seq.integrate()
        assert (done.appended, done.unattested, done.waiting) == (80, 0, 0)
        assert asked == reads
    finally:
        await pool.close()


async def test_a_pass_gives_the_worker_s_event_loop_turns_while_it_checks(
    log_db: LogDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The sequencer shares the worker's event loop with its tool calls. Walking chains read
    ahead waits on nothing, so a pass gives the loop a turn between stretches (here after every
    row): a task beside it runs between one row's check and the next, not only while the pass
    waits for Postgres."""
    monkeypatch.setattr("sagacity.evidence.attest.TURN_S", 0.0)
    tag = uuid.uuid4().hex[:6]
    await write_sagas(log_db, [f"turns-{tag}-{n:02d}" for n in range(40)], calls=1)
    pool = await open_pool(log_db.app_url, max_size=4)
    beside = 0

    async def a_tool_call() -> None:
        nonlocal beside
        while True:
            beside += 1
            await asyncio.sleep(0)

    seq = sequencer(TlogStore(pool), log_db)
    covers = seq.attestor.covers
    seen: list[int] = []  # how far the task beside had run at each row's check

    async def counted(saga_id: str, at: int, row_hash: str) -> bool:
        seen.append(beside)
        return await covers(saga_id, at, row_hash)

    monkeypatch.setattr(seq.attestor, "covers", counted)
    task = asyncio.create_task(a_tool_call())
    try:
        done = await seq.integrate()
        assert done.appended == 80 and len(seen) == 80
        ran_between = sum(b > a for a, b in itertools.pairwise(seen))
        assert ran_between == 79, seen
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        await pool.close()


async def test_rows_above_an_edited_row_are_judged_on_their_own_chain(log_db: LogDb) -> None:
    """An insider edits row 3 of six (its input; the stored hash left as the worker wrote it).
    Rows 4 to 6 still chain to the checkpoint at 6 from row 3's stored hash: they are logged,
    and only row 3 is named, in every pass. (The walk from row 1, which breaks at row 3, used to
    decide rows 4 to 6 too, and named them forged.)"""
    saga = f"edited-{uuid.uuid4().hex[:6]}"
    await write_sagas(log_db, [saga], calls=3)
    await owner_sql(
        log_db,
        (
            "UPDATE side_effect_journal SET input = input || ' ' WHERE saga_id = %s AND seq = 3",
            (saga,),
        ),
    )
    pool = await open_pool(log_db.app_url, max_size=3)
    try:
        seq = sequencer(TlogStore(pool), log_db, grace=timedelta(0))
        for _ in range(2):
            done = await seq.integrate()
            assert [(r.saga_id, r.seq) for r in done.named] == [(saga, 3)]
            assert await logged(log_db, saga) == [1, 2, 4, 5, 6]
        found = about(await findings(TlogStore(pool), log_db, timedelta(0)), saga)
        assert [(fatal, at) for fatal, at, _ in found] == [(True, 3)], found
    finally:
        await pool.close()


@pytest.mark.parametrize("calls", [60, 300])  # chains read ahead, and one read on its own
async def test_a_saga_edited_throughout_costs_a_pass_one_read_of_its_rows(
    log_db: LogDb, monkeypatch: pytest.MonkeyPatch, calls: int
) -> None:
    """Someone edits every row of a saga not yet logged. Each row is judged on its own chain,
    but the pass still reads the saga's rows once, as for a clean one (a walk a row, each up to
    the top checkpoint, made the sequencer's pass quadratic in the saga's length)."""
    saga = f"every-{uuid.uuid4().hex[:6]}"
    await write_sagas(log_db, [saga], calls=calls)
    await owner_sql(
        log_db,
        ("UPDATE side_effect_journal SET input = input || ' ' WHERE saga_id = %s", (saga,)),
    )
    pool = await open_pool(log_db.app_url, max_size=3)
    try:
        seq = sequencer(TlogStore(pool), log_db)
        journal = seq.attestor._journal
        read: list[int] = []
        after, ahead = journal.after, read_spans

        async def counted(*args: Any, **kw: Any) -> Any:
            found = await after(*args, **kw)
            read.append(len(found))
            return found

        async def read_ahead(pool: Any, wanted: dict[str, Any]) -> Any:
            found = await ahead(pool, wanted)
            read.append(sum(map(len, found.values())))
            return found

        monkeypatch.setattr(journal, "after", counted)
        monkeypatch.setattr("sagacity.evidence.attest.read_spans", read_ahead)
        done = await seq.integrate()
        assert (done.appended, done.waiting) == (0, 2 * calls)
        assert sum(read) <= 2 * calls, read
    finally:
        await pool.close()


async def test_a_pass_checks_one_signature_a_clean_saga(
    log_db: LogDb, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A signature check is the costliest step of attesting a saga: a clean one needs its
    highest checkpoint's only, though each of its 3 calls left one."""
    tag = uuid.uuid4().hex[:6]
    await write_sagas(log_db, [f"clean-{tag}-{n:02d}" for n in range(40)], calls=3)
    checked: list[str] = []
    verify = Checkpoint.verify

    def counted(cp: Checkpoint, keys: Any) -> str | None:
        checked.append(cp.saga_id)
        return verify(cp, keys)

    monkeypatch.setattr(Checkpoint, "verify", counted)
    pool = await open_pool(log_db.app_url, max_size=3)
    try:
        done = await sequencer(TlogStore(pool), log_db).integrate()
        assert done.appended == 240
        assert len(checked) == 40 and len(set(checked)) == 40, checked
    finally:
        await pool.close()
