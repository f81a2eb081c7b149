"""The transparency log on real Postgres: integrate, prove, check offline, and every attack caught.

Each test has a database of its own (the log covers every row of a database, and the attacks
poison it): created and migrated by the server's owner, used through ``sagacity_app`` as a
worker would, attacked through the owner's connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from typer.testing import CliRunner

from sagacity.cli.main import app
from sagacity.devstack import Endpoints
from sagacity.errors import LogInconsistent
from sagacity.evidence.attest import Attestor
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.keys import generate_key, load_private_key, load_public_key, public_pem
from sagacity.evidence.logverify import LogFinding, LogVerifier
from sagacity.evidence.merkle import Frontier, leaf_data, leaf_hash
from sagacity.evidence.note import (
    COSIGNATURE_V1,
    Cosigner,
    NoteKey,
    NoteSigner,
    TreeHead,
    WitnessCosigner,
    sign_note,
)
from sagacity.evidence.proofs import ProofVerdict, check_proof_bundle
from sagacity.evidence.tlog import HISTORY, HeadLog, Sequencer, prove_saga, run_sequencer
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, entry_hash
from sagacity.store import JournalStore, apply_grants, migrate, open_pool
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.tlog import TlogStore


@dataclass
class LogDb:
    owner_url: str
    app_url: str
    keys: Path
    checkpoints: Path

    @property
    def signing_key(self) -> Path:
        return self.keys / "signing.pem"

    @property
    def public_key(self) -> Path:
        """The signing key's public half, pinned apart from the workers' key folder."""
        return self.keys.parent / "pinned" / "signing.pem.pub"


@pytest.fixture
async def log_db(endpoints: Endpoints, tmp_path: Path) -> AsyncIterator[LogDb]:
    name = f"sagacity_tlog_{uuid.uuid4().hex[:10]}"
    owner = await ensure_database(endpoints.database_url, name)
    try:
        await migrate(owner)
        await apply_grants(owner)
        keys = tmp_path / "keys"
        keys.mkdir()
        (tmp_path / "pinned").mkdir()
        (tmp_path / "pinned" / "signing.pem.pub").write_bytes(
            public_pem(generate_key(keys / "signing.pem").public_key())
        )
        yield LogDb(owner, make_conninfo(owner, user="sagacity_app"), keys, tmp_path / "cp")
    finally:
        await drop_database(endpoints.database_url, name)


async def write_sagas(db: LogDb, names: list[str], calls: int = 2) -> list[Entry]:
    """Each saga gets ``calls`` tool calls (INTENT + EXECUTED), interleaved across sagas, as a
    worker writes them: each outcome checkpointed (covering its INTENT through the chain)."""
    rows = []
    writer = CheckpointWriter(db.checkpoints, load_private_key(db.signing_key))
    async with await JournalStore.open(db.app_url, max_size=2) as journal:
        for n in range(calls):
            for saga_id in names:
                args = f'{{"amount": {n + 1}, "to": "Zoë"}}'
                rows.append(await journal.append(Draft(saga_id, "pay", Phase.INTENT, args)))
                outcome = Draft(saga_id, "pay", Phase.EXECUTED, args, f'{{"id": "tx{n}"}}')
                rows.append(await journal.append(outcome))
                writer.record(saga_id, rows[-1].seq, rows[-1].hash)
    return rows


def sequencer(
    store: TlogStore,
    db: LogDb,
    cosigners: Sequence[Cosigner] = (),
    grace: timedelta = timedelta(minutes=10),
) -> Sequencer:
    key = load_private_key(db.signing_key)
    return Sequencer(store, db.checkpoints, key, cosigners=cosigners, grace=grace)


async def findings(
    store: TlogStore, db: LogDb, grace: timedelta = timedelta(minutes=10)
) -> list[LogFinding]:
    heads = HeadLog(db.checkpoints, load_public(db))
    attestor = Attestor(JournalStore(store.pool), CheckpointDir(db.checkpoints, load_public(db)))
    verifier = LogVerifier(store, heads, attestor, grace)
    return [f async for f in verifier.run()]


def load_public(db: LogDb) -> Ed25519PublicKey:
    return load_public_key(db.public_key)


def history(db: LogDb) -> list[dict[str, object]]:
    path = db.checkpoints / "tlog" / "checkpoints.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_integrate_publish_prove_and_check_offline(log_db: LogDb, tmp_path: Path) -> None:
    tag = uuid.uuid4().hex[:6]
    sagas = [f"order-{tag}-{n}" for n in range(3)]
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        witness = Ed25519PrivateKey.generate()
        seq = sequencer(store, log_db, [WitnessCosigner("witness.test/w", witness)])
        # a new log publishes the empty tree's head, so `log head` has one from the start
        empty = await seq.integrate()
        assert empty.published is not None and empty.published.size == 0
        assert (await seq.integrate()).published is None
        await write_sagas(log_db, sagas)
        first = await seq.integrate()
        assert (first.appended, first.size) == (12, 12)
        assert first.published is not None
        assert (
            first.published.origin
            == f"sagacity.local/journal/{conninfo_to_dict(log_db.owner_url)['dbname']}"
        )
        again = await seq.integrate()
        assert (again.appended, again.published) == (0, None)

        await write_sagas(log_db, [sagas[0]], calls=1)
        second = await seq.integrate(full_check=True)
        assert (second.appended, second.size) == (2, 14)
        lines = history(log_db)
        assert [len(line["consistency"]) > 0 for line in lines] == [False, False, True]  # type: ignore[arg-type]
        latest = (log_db.checkpoints / "tlog" / "checkpoint").read_text()
        assert latest == lines[2]["note"]
        assert latest.startswith(f"{first.published.origin}\n14\n")

        assert [f for f in await findings(store, log_db) if f.fatal] == []
        # the app login that runs the sequencer may add to the log, never change it
        async with await psycopg.AsyncConnection.connect(log_db.app_url, autocommit=True) as app:
            for statement in (
                "UPDATE sagacity_tlog_leaf SET seq = seq",
                "DELETE FROM sagacity_tlog_node",
                "TRUNCATE sagacity_tlog_leaf",
            ):
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    await app.execute(statement)

        out = tmp_path / "proof"
        journal = JournalStore(pool)
        heads = HeadLog(log_db.checkpoints, load_public(log_db))
        proved = await prove_saga(journal, store, heads, sagas[0], out)
        assert (proved.rows, proved.later, proved.head.size) == (6, 0, 14)
    finally:
        await pool.close()

    # the bundle holds this saga's rows and no other saga's
    for file in out.iterdir():
        text = file.read_text()
        assert sagas[1] not in text and sagas[2] not in text
    key = load_public(log_db)
    report = check_proof_bundle(out, key)
    assert (report.verdict, report.rows, report.problems) == (ProofVerdict.VERIFIED, 6, [])
    witness_key = NoteKey("witness.test/w", witness.public_key(), COSIGNATURE_V1)
    assert check_proof_bundle(out, key, [witness_key]).verdict is ProofVerdict.VERIFIED
    assert check_proof_bundle(out, None).verdict is ProofVerdict.UNTRUSTED
    other = Ed25519PrivateKey.generate().public_key()
    stranger = check_proof_bundle(out, other)
    assert stranger.verdict is ProofVerdict.FAILED
    assert "no signature of the trusted key" in stranger.problems[0]

    # a row changed, or dropped from the middle, fails naming its seq
    rows = (out / "rows.jsonl").read_text().splitlines()
    (out / "rows.jsonl").write_text("\n".join(rows).replace("tx1", "tx9") + "\n")
    changed = check_proof_bundle(out, key)
    assert changed.verdict is ProofVerdict.FAILED
    assert f"saga '{sagas[0]}' seq 4: hash_mismatch" in changed.problems[0]
    proofs = (out / "proofs.jsonl").read_text().splitlines()
    (out / "rows.jsonl").write_text("\n".join(rows[:2] + rows[3:]) + "\n")
    (out / "proofs.jsonl").write_text("\n".join(proofs[:2] + proofs[3:]) + "\n")
    gap = check_proof_bundle(out, key)
    assert gap.verdict is ProofVerdict.FAILED and "seq 4: gap" in gap.problems[0]


async def owner_sql(db: LogDb, *statements: tuple[str, tuple[object, ...]]) -> None:
    async with await psycopg.AsyncConnection.connect(db.owner_url, autocommit=True) as conn:
        for query, params in statements:
            await conn.execute(query, params)


def forged_rows(saga_id: str, at: datetime) -> list[Entry]:
    rows, prev = [], GENESIS_HASH
    for seq, phase in enumerate((Phase.INTENT, Phase.EXECUTED), start=1):
        draft = Entry(saga_id, seq, "pay", phase, '{"amount": 1}', "", at, "")
        digest = entry_hash(prev, draft)
        rows.append(Entry(saga_id, seq, "pay", phase, draft.input, "", at, digest))
        prev = digest
    return rows


ATTACKS = ["alter", "delete_saga", "forge_saga", "truncate_tail", "edit_leaf", "rewrite_log"]


@pytest.mark.parametrize("attack", ATTACKS)
async def test_each_attack_is_detected_naming_saga_and_seq(log_db: LogDb, attack: str) -> None:
    tag = uuid.uuid4().hex[:6]
    a, b, c = (f"s{n}-{tag}" for n in range(3))
    await write_sagas(log_db, [a, b, c])
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        store = TlogStore(pool)
        seq = sequencer(store, log_db)
        await seq.integrate()
        expected: set[tuple[str | None, int | None]]
        if attack == "alter":
            await owner_sql(
                log_db,
                (
                    'UPDATE side_effect_journal SET payload = \'{"id": "stolen"}\', '
                    "hash = repeat('a', 64) WHERE saga_id = %s AND seq = 2",
                    (b,),
                ),
            )
            expected = {(b, 2)}
        elif attack == "delete_saga":
            await owner_sql(log_db, ("DELETE FROM side_effect_journal WHERE saga_id = %s", (b,)))
            expected = {(b, n) for n in range(1, 5)}
        elif attack == "forge_saga":
            forged = f"forged-{tag}"
            await insert_rows(log_db, forged_rows(forged, datetime.now(UTC) - timedelta(hours=1)))
            expected = {(forged, 1), (forged, 2)}
        elif attack == "truncate_tail":
            await owner_sql(
                log_db, ("DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 2", (c,))
            )
            expected = {(c, 3), (c, 4)}
        elif attack == "edit_leaf":
            await owner_sql(
                log_db,
                (
                    "UPDATE sagacity_tlog_leaf SET row_hash = repeat('b', 64) "
                    "WHERE saga_id = %s AND seq = 1",
                    (a,),
                ),
            )
            expected = {(a, 1)}
        else:  # rewrite_log: saga b swapped for forged rows in the journal and in the log
            now = datetime.now(UTC)
            swapped = forged_rows(f"x-{tag}", now) + forged_rows(f"y-{tag}", now)
            await owner_sql(log_db, ("DELETE FROM side_effect_journal WHERE saga_id = %s", (b,)))
            await insert_rows(log_db, swapped)
            await rewrite_log(log_db, b, swapped)
            expected = {(None, None)}

        found = [f for f in await findings(store, log_db) if f.fatal]
        assert found, attack
        assert expected <= {(f.saga_id, f.seq) for f in found}, [f.line() for f in found]
        if attack == "rewrite_log":
            assert "disagrees with tree head 12" in found[0].detail
        if attack in ("edit_leaf", "rewrite_log"):
            # the sequencer refuses to sign over the tampered log, and publishes nothing
            await write_sagas(log_db, [f"after-{tag}"], calls=1)
            before = history(log_db)
            with pytest.raises(LogInconsistent, match="refusing to sign"):
                await seq.integrate(full_check=attack == "edit_leaf")
            assert history(log_db) == before
    finally:
        await pool.close()


async def insert_rows(db: LogDb, rows: list[Entry]) -> None:
    await owner_sql(
        db,
        *[
            (
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
            for r in rows
        ],
    )


async def rewrite_log(db: LogDb, saga_id: str, forged: list[Entry]) -> None:
    """What an owner who knows the rules does: put ``forged`` in the leaves of ``saga_id``,
    then recompute every stored subtree hash."""
    async with await psycopg.AsyncConnection.connect(db.owner_url, autocommit=True) as conn:
        cur = await conn.execute(
            "SELECT idx FROM sagacity_tlog_leaf WHERE saga_id = %s ORDER BY idx", (saga_id,)
        )
        for (index,), row in zip(await cur.fetchall(), forged, strict=True):
            await conn.execute(
                "UPDATE sagacity_tlog_leaf SET saga_id = %s, seq = %s, row_hash = %s "
                "WHERE idx = %s",
                (row.saga_id, row.seq, row.hash, index),
            )
        await conn.execute("TRUNCATE sagacity_tlog_node")
        cur = await conn.execute(
            "SELECT saga_id, seq, row_hash FROM sagacity_tlog_leaf ORDER BY idx"
        )
        frontier = Frontier()
        for leaf in await cur.fetchall():
            for (level, index), digest in frontier.append(leaf_hash(leaf_data(*leaf))):
                await conn.execute(
                    "INSERT INTO sagacity_tlog_node VALUES (%s, %s, %s)", (level, index, digest)
                )


def test_cli_integrate_head_verify_prove_and_check(log_db: LogDb, tmp_path: Path) -> None:
    saga = f"cli-{uuid.uuid4().hex[:6]}"
    asyncio.run(write_sagas(log_db, [saga, saga + "-other"]))
    env = {
        "SAGACITY_DATABASE_URL": log_db.app_url,
        "SAGACITY_CHECKPOINT_DIR": str(log_db.checkpoints),
        "SAGACITY_SIGNING_KEY": str(log_db.signing_key),
        "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(log_db.public_key),
    }
    runner = CliRunner()

    def run(*args: str) -> tuple[int, str, str]:
        result = runner.invoke(app, list(args), env=env)
        return result.exit_code, result.stdout, result.stderr

    code, out, err = run("log", "integrate")
    assert (code, out) == (0, "8 rows appended; published tree head 8\n"), err
    code, out, _ = run("log", "integrate", "--json")
    assert json.loads(out) == {
        "appended": 0,
        "size": 8,
        "published": False,
        "waiting": 0,
        "unattested": 0,
        "named": [],
    }
    code, out, err = run("log", "head")
    assert code == 0 and out.split("\n")[1] == "8" and "\n\n\u2014 " in out
    assert "verifier key: sagacity.local/journal/" in err
    code, out, _ = run("log", "verify")
    assert code == 0 and out.endswith(
        "8 leaves, 1 tree heads (latest 8), 0 rows pending: all verified\n"
    )

    bundle = tmp_path / "bundle"
    code, out, err = run("prove", saga, "--out", str(bundle))
    assert code == 0, err
    assert out == f"{bundle}: 4 rows of saga '{saga}', each proved in tree head 8\n"
    code, out, _ = run("prove", "--check", str(bundle), "--public-key", str(log_db.public_key))
    assert code == 0 and out.startswith(f"VERIFIED: saga '{saga}', 4 rows in tree head 8")
    code, out, err = run("prove", "--check", str(bundle))
    assert code == 3 and out.startswith("UNTRUSTED") and "--public-key" in err

    asyncio.run(
        owner_sql(
            log_db, ("DELETE FROM side_effect_journal WHERE saga_id = %s", (saga + "-other",))
        )
    )
    code, out, _ = run("log", "verify", "--json")
    lines = [json.loads(line) for line in out.splitlines()]
    assert code == 1
    assert {(f["saga_id"], f["seq"]) for f in lines[:-1]} == {
        (saga + "-other", n) for n in range(1, 5)
    }
    assert lines[-1]["summary"]["failed"] == 4


async def test_a_worker_runs_the_sequencer_in_the_background(log_db: LogDb) -> None:
    tag = uuid.uuid4().hex[:6]
    await write_sagas(log_db, [f"bg-{tag}"], calls=1)
    # checkpoints off: nothing to run
    await asyncio.wait_for(run_sequencer(log_db.app_url, None, log_db.signing_key), 1)
    task = asyncio.create_task(
        run_sequencer(log_db.app_url, log_db.checkpoints, log_db.signing_key, every=0.05)
    )
    try:
        # the rows written before it starts, then rows written while it runs
        for size, more in ((2, f"bg2-{tag}"), (4, None)):
            for _ in range(200):
                if latest_size(log_db) == size:
                    break
                await asyncio.sleep(0.05)
            assert latest_size(log_db) == size
            if more:
                await write_sagas(log_db, [more], calls=1)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def latest_size(db: LogDb) -> int | None:
    path = db.checkpoints / "tlog" / "checkpoint"
    return int(path.read_text().split("\n")[1]) if path.exists() else None


def test_the_latest_head_is_read_from_the_end(tmp_path: Path) -> None:
    key = Ed25519PrivateKey.generate()
    heads = HeadLog(tmp_path, key.public_key())
    origin = "test.example/log"
    for size in range(1, 400):  # more than one 64 KiB read from the end
        note = sign_note(TreeHead(origin, size, bytes(32)), [NoteSigner(origin, key)])
        heads.publish(note, [], datetime.now(UTC))
    with (tmp_path / "tlog" / HISTORY).open("a") as out:
        out.write('{"at": "2026-')  # a crash in the middle of a write
    latest = heads.latest()
    assert latest is not None and latest.head.size == 399
    assert (tmp_path / "tlog" / "checkpoint").read_text() == latest.note
