"""Fresh bundles: an export carries the log's newest witnessed tree head, and verifiers refuse an
old bundle as current.

Each test has a database of its own (the log covers every row of a database): sagas are written
through ``sagacity_app`` with signed checkpoints as a worker writes them, a real sequencer pass
publishes the tree head (cosigned by a witness key held apart), and the bundle is verified
offline, by the library and by the CLI with no database setting at all.
"""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.bundle import JOURNAL, MANIFEST, BundleReport, BundleVerdict, verify_bundle
from sagacity.evidence.bundle_head import HEAD, LOG_PROOFS
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.export import export_bundle
from sagacity.evidence.heads import LogSnapshot, stamp
from sagacity.evidence.keys import load_private_key, public_pem
from sagacity.evidence.note import (
    COSIGNATURE_V1,
    NoteKey,
    NoteSigner,
    TreeHead,
    WitnessCosigner,
    sign_note,
)
from sagacity.evidence.proofs import ProofVerdict, check_proof_bundle
from sagacity.evidence.report import Source
from sagacity.evidence.tlog import HISTORY, LATEST, SUBDIR, HeadLog, Sequencer, prove_saga
from sagacity.evidence.trust import TrustedKey, TrustedWitness, TrustRoots, write_trust
from sagacity.journal import Draft, Entry, Phase
from sagacity.store import JournalStore, Pool, open_pool
from sagacity.store.tlog import TlogStore
from tests.evidence.test_bundle import flip, offline_env, rewrite_manifest, run_cli
from tests.evidence.test_tlog import LogDb, log_db  # noqa: F401  (the per-test database)

WITNESS = "witness.test/w1"
DAY = 86400.0


class Log:
    """One test's journal, checkpoints and log, and the witness that cosigns its heads."""

    def __init__(self, db: LogDb, pool: Pool) -> None:
        self.db = db
        self.pool = pool
        self.journal = JournalStore(pool)
        self.store = TlogStore(pool)
        self.key = load_private_key(db.signing_key)
        self.public = self.key.public_key()
        self.writer = CheckpointWriter(db.checkpoints, self.key)
        self.witness = Ed25519PrivateKey.generate()
        #: when the witness says it cosigns (POSIX seconds); tests move it to make old heads
        self.clock = time.time()

    def trust(self, quorum: int = 1) -> TrustRoots:
        return TrustRoots(
            (TrustedKey("log", self.public),),
            (TrustedWitness(WITNESS, self.witness.public_key()),),
            quorum,
        )

    def pool_keys(self) -> list[NoteKey]:
        """The witness's cosignature key, as a trust file's witnesses are given to verifiers."""
        return [NoteKey(WITNESS, self.witness.public_key(), COSIGNATURE_V1)]

    async def saga(self, saga_id: str, calls: int = 2) -> list[Entry]:
        """``calls`` tool calls, each row checkpointed as a worker does."""
        rows = []
        for n in range(calls):
            args = json.dumps({"amount": n + 1, "to": "Zoë"})
            for draft in (
                Draft(saga_id, "pay", Phase.INTENT, args),
                Draft(saga_id, "pay", Phase.EXECUTED, args, json.dumps({"id": f"tx{n}"})),
            ):
                row = await self.journal.append(draft)
                self.writer.record(saga_id, row.seq, row.hash)
                rows.append(row)
        return rows

    async def integrate(self, *, witnessed: bool = True) -> TreeHead:
        cosigners = [WitnessCosigner(WITNESS, self.witness, clock=lambda: self.clock)]
        sequencer = Sequencer(
            self.store, self.db.checkpoints, self.key, cosigners=cosigners if witnessed else []
        )
        done = await sequencer.integrate()
        assert done.published is not None
        return done.published

    async def export(self, out: Path, sagas: Sequence[str]) -> dict[str, Any]:
        heads = HeadLog(self.db.checkpoints, self.public)
        return await export_bundle(
            self.journal,
            out,
            sagas,
            checkpoints=CheckpointDir(self.db.checkpoints, self.public),
            signing_key=self.key,
            log=LogSnapshot.latest(heads, self.store),
        )

    @property
    def published(self) -> Path:
        return self.db.checkpoints / SUBDIR / LATEST


@pytest.fixture
async def log(log_db: LogDb) -> AsyncIterator[Log]:  # noqa: F811
    pool = await open_pool(log_db.app_url, max_size=4)
    try:
        yield Log(log_db, pool)
    finally:
        await pool.close()


def faults(report: BundleReport) -> list[str]:
    return report.problems + [
        f"saga {s.saga_id!r} {f.source} seq {f.seq}: {f.detail}"
        for s in report.sagas
        for f in s.faults()
    ]


def sagas(n: int = 2) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    return [f"order-{tag}-{i}" for i in range(n)]


async def test_a_bundle_carries_the_witnessed_head_and_says_when_it_is_fresh_as_of(
    log: Log, tmp_path: Path
) -> None:
    names = sagas()
    for name in names:
        await log.saga(name)
    log.clock = time.time() - 3600  # the witness cosigned an hour ago
    head = await log.integrate()
    out = tmp_path / "bundle"
    manifest = await log.export(out, names)

    assert "tlog" in manifest["anchors"]
    assert (manifest["tlog"]["size"], manifest["tlog"]["origin"]) == (head.size, head.origin)
    # the note as published, cosignatures and all
    assert (out / HEAD).read_text() == log.published.read_text()
    assert len((out / LOG_PROOFS).read_text().splitlines()) == 2

    report = verify_bundle(out, public_key=log.public, trust=log.trust())
    assert report.verdict() is BundleVerdict.VERIFIED, faults(report)
    assert report.freshness is not None
    assert report.freshness.line() == (
        f"fresh as of {stamp(datetime.fromtimestamp(int(log.clock), UTC))} "
        f"(witness {WITNESS}'s cosignature)"
    )
    # the trust file alone pins the key: its signer whose fingerprint the manifest names
    pinned = verify_bundle(out, trust=log.trust())
    assert pinned.verdict() is BundleVerdict.VERIFIED, faults(pinned)
    stranger = TrustRoots((TrustedKey("other", Ed25519PrivateKey.generate().public_key()),))
    refused = verify_bundle(out, trust=stranger)
    assert refused.verdict() is BundleVerdict.FAILED
    assert "which the trust file does not pin" in refused.problems[0]
    (saga,) = [s for s in report.sagas if s.saga_id == names[0]]
    (logged,) = [c for c in saga.checks if c.source is Source.LOG]
    assert logged.seq == 4 and f"of tree head {head.size}" in logged.detail

    # the auditor's command line: the bundle, and a trust file pinning the log's key and witness
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    trust = auditor / "trust.json"
    write_trust(trust, log.trust())
    env = offline_env()
    args = ["verify", "--bundle", str(out), "--trust", str(trust)]
    fresh = run_cli(*args, "--not-older-than", "PT2H", env=env, cwd=auditor)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert report.freshness.line() in fresh.stdout
    assert f"tree head {head.size} of {head.origin}, cosigned by {WITNESS} at" in fresh.stdout
    assert "2 sagas, 8 rows: VERIFIED" in fresh.stdout

    stale = run_cli(*args, "--not-older-than", "PT30M", env=env, cwd=auditor)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "2 sagas, 8 rows: STALE" in stale.stdout
    assert "more than the 30m allowed" in stale.stdout

    # `sagacity export` carries the same head, read from the checkpoint folder
    exporter = {
        **offline_env(),
        "SAGACITY_DATABASE_URL": log.db.app_url,
        "SAGACITY_CHECKPOINT_DIR": str(log.db.checkpoints),
        "SAGACITY_SIGNING_KEY": str(log.db.signing_key),
    }
    cli_out = tmp_path / "cli-bundle"
    exported = run_cli(
        *["export", *names, "--out", str(cli_out), "--json"], env=exporter, cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    result = json.loads(exported.stdout)
    assert (result["tree_head"]["size"], result["tree_head"]["origin"]) == (head.size, head.origin)
    assert (cli_out / HEAD).read_text() == log.published.read_text()
    again = run_cli("verify", "--bundle", str(cli_out), "--trust", str(trust), env=env, cwd=auditor)
    assert again.returncode == 0 and report.freshness.line() in again.stdout, again.stdout


async def test_an_old_head_is_stale_and_a_newer_checkpoint_says_how_far_the_log_grew(
    log: Log, tmp_path: Path
) -> None:
    names = sagas()
    await log.saga(names[0])
    log.clock = time.time() - 2 * DAY
    old = await log.integrate()
    out = tmp_path / "bundle"
    await log.export(out, names[:1])

    # a day's limit refuses a head witnessed two days ago
    report = verify_bundle(
        out, public_key=log.public, trust=log.trust(), not_older_than=timedelta(days=1)
    )
    assert report.verdict() is BundleVerdict.STALE and faults(report) == []
    assert "which is 2d old, more than the 1d allowed" in report.stale[0]
    assert BundleVerdict.STALE.exit_code == 1

    # the log grows; the auditor holds its newer head, out of band
    await log.saga(names[1])
    log.clock = time.time()
    new = await log.integrate()
    note = log.published.read_text()
    grown = verify_bundle(out, public_key=log.public, trust=log.trust(), newer=note)
    assert grown.verdict() is BundleVerdict.STALE, faults(grown)
    assert grown.stale == [
        f"the log has grown to size {new.size} since the bundle's tree head {old.size} "
        f"({grown.freshness.line() if grown.freshness else ''}); rows after the bundle's head "
        "are not covered"
    ]
    assert any("cannot check that tree head" in n for n in grown.notes)

    # with the log's history the consistency proofs are at hand, and they verify
    history = (log.db.checkpoints / SUBDIR / HISTORY).read_text()
    proved = verify_bundle(out, public_key=log.public, newer=history)
    assert proved.verdict() is BundleVerdict.STALE, faults(proved)
    assert any(
        f"tree head {new.size} is consistent with the bundle's tree head {old.size}" in n
        for n in proved.notes
    )

    # the bundle's own head, handed back, shows nothing newer
    same = verify_bundle(out, public_key=log.public, newer=(out / HEAD).read_text())
    assert same.verdict() is BundleVerdict.VERIFIED, faults(same)
    assert any("has not grown since" in n for n in same.notes)

    # a head of the bundle's size with another root, signed by the log's key: a fork
    origin = old.origin
    fork = sign_note(TreeHead(origin, old.size, bytes(32)), [NoteSigner(origin, log.key)])
    forked = verify_bundle(out, public_key=log.public, newer=fork)
    assert forked.verdict() is BundleVerdict.FAILED
    assert any("the log was forked" in p for p in forked.problems)

    # the CLI, offline
    newer = tmp_path / "newer.note"
    newer.write_text(note)
    public = tmp_path / "log.pub"
    public.write_bytes(public_pem(log.public))
    cli = run_cli(
        "verify",
        "--bundle",
        str(out),
        "--public-key",
        str(public),
        "--checkpoint",
        str(newer),
        env=offline_env(),
        cwd=tmp_path,
    )
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert "STALE" in cli.stdout and f"the log has grown to size {new.size}" in cli.stdout


async def test_a_swapped_or_forged_head_fails(log: Log, tmp_path: Path) -> None:
    names = sagas(1)
    await log.saga(names[0])
    head = await log.integrate()
    out = tmp_path / "bundle"
    await log.export(out, names)
    original = (out / HEAD).read_text()

    # another log's head, signed by its own key
    other = Ed25519PrivateKey.generate()
    (out / HEAD).write_text(
        sign_note(TreeHead("other.log/x", 1, bytes(32)), [NoteSigner("other.log/x", other)])
    )
    rewrite_manifest(out)
    report = verify_bundle(out, public_key=log.public)
    assert report.verdict() is BundleVerdict.FAILED
    assert any(
        p.startswith(f"{HEAD}: not a tree head signed by the trusted key") for p in report.problems
    )

    # the head's size changed under the log's signature: forged
    forged = original.replace(f"\n{head.size}\n", f"\n{head.size + 5}\n", 1)
    (out / HEAD).write_text(forged)
    rewrite_manifest(out)
    report = verify_bundle(out, public_key=log.public)
    assert any("does not verify" in p and p.startswith(HEAD) for p in report.problems), (
        report.problems
    )

    # another head signed by the log's own key (a fork shown to this bundle): the manifest no
    # longer lists it, and the saga's inclusion proof does not verify against it
    fork = sign_note(
        TreeHead(head.origin, head.size, bytes(32)), [NoteSigner(head.origin, log.key)]
    )
    (out / HEAD).write_text(fork)
    rewrite_manifest(out)
    report = verify_bundle(out, public_key=log.public)
    assert report.verdict() is BundleVerdict.FAILED
    assert any("is not the one the manifest lists" in p for p in report.problems)
    (saga,) = report.sagas
    assert [f.source for f in saga.faults()] == [Source.LOG]


async def test_a_tampered_inclusion_proof_fails_naming_the_saga(log: Log, tmp_path: Path) -> None:
    names = sagas(3)
    for name in names:
        await log.saga(name)
    await log.integrate()
    out = tmp_path / "bundle"
    await log.export(out, names)
    lines = [json.loads(line) for line in (out / LOG_PROOFS).read_text().splitlines()]
    (victim,) = [line for line in lines if line["saga_id"] == names[1]]
    victim["hashes"][0] = base64.b64encode(bytes(32)).decode()
    (out / LOG_PROOFS).write_text("".join(json.dumps(line) + "\n" for line in lines))
    rewrite_manifest(out)  # the digests agree again; the manifest's signature no longer does

    report = verify_bundle(out, public_key=log.public)

    assert report.verdict() is BundleVerdict.FAILED
    failed = [s.saga_id for s in report.sagas if not s.ok]
    assert failed == [names[1]]
    (fault,) = next(s for s in report.sagas if not s.ok).faults()
    assert (fault.source, fault.seq) == (Source.LOG, 4)
    assert "inclusion proof (leaf" in fault.detail


async def test_witness_cosignatures_count_only_when_trusted_and_genuine(
    log: Log, tmp_path: Path
) -> None:
    names = sagas(1)
    await log.saga(names[0])
    await log.integrate(witnessed=False)
    out = tmp_path / "bundle"
    await log.export(out, names)

    # no cosignature: the trust file's quorum is not met, the bundle is refused as unanchored
    bare = verify_bundle(out, public_key=log.public, trust=log.trust())
    assert bare.verdict() is BundleVerdict.UNANCHORED and faults(bare) == []
    assert "has 0 of the 1 witness cosignatures required" in bare.unanchored[0]
    # without one, the signed manifest dates it, and says so
    assert bare.freshness is not None and bare.freshness.signed
    assert "publication time, as the signed manifest states it" in bare.freshness.source

    # a cosignature made by someone else's key under the witness's name does not count
    impostor = WitnessCosigner(WITNESS, Ed25519PrivateKey.generate())
    note = (out / HEAD).read_text()
    (out / HEAD).write_text(note + impostor(note.split("\n\n")[0] + "\n"))
    rewrite_manifest(out)
    assert (
        "0 of the 1 witness cosignatures required"
        in verify_bundle(out, public_key=log.public, trust=log.trust()).unanchored[1]
    )

    # the witness cosigns the published head later, as a witness service adds its line to the
    # log's checkpoint file: the next export carries it, and it dates the bundle
    published = log.published.read_text()
    witness = WitnessCosigner(WITNESS, log.witness, clock=lambda: log.clock)
    log.published.write_text(published + witness(published.split("\n\n")[0] + "\n"))
    later = tmp_path / "later"
    await log.export(later, names)
    cosigned = verify_bundle(later, public_key=log.public, trust=log.trust())
    assert cosigned.verdict() is BundleVerdict.VERIFIED, faults(cosigned)
    assert cosigned.freshness is not None
    assert cosigned.freshness.source == f"witness {WITNESS}'s cosignature"


async def test_a_proof_bundle_is_fresh_as_of_its_witness_and_refused_when_old(
    log: Log, tmp_path: Path
) -> None:
    names = sagas(2)
    await log.saga(names[0], calls=3)
    log.clock = time.time() - 2 * DAY
    old = await log.integrate()
    heads = HeadLog(log.db.checkpoints, log.public)
    out = tmp_path / "proof"
    await prove_saga(log.journal, log.store, heads, names[0], out)

    checked = check_proof_bundle(out, log.public, pool=log.pool_keys(), quorum=1)
    assert checked.verdict is ProofVerdict.VERIFIED, checked.problems
    assert checked.freshness is not None
    assert checked.freshness.source == f"witness {WITNESS}'s cosignature"
    limit = timedelta(days=1)
    stale = check_proof_bundle(
        out, log.public, pool=log.pool_keys(), quorum=1, not_older_than=limit
    )
    assert stale.verdict is ProofVerdict.STALE and stale.problems == []
    assert ProofVerdict.STALE.exit_code == 1
    # without a trusted witness only the unsigned manifest dates it, which does not count
    unsigned = check_proof_bundle(out, log.public, not_older_than=timedelta(days=30))
    assert unsigned.verdict is ProofVerdict.STALE
    assert "nothing signed by a key you trust dates it" in unsigned.stale[0]

    await log.saga(names[1])
    log.clock = time.time()
    new = await log.integrate()
    newer = tmp_path / "history.jsonl"
    newer.write_text((log.db.checkpoints / SUBDIR / HISTORY).read_text())
    public = tmp_path / "log.pub"
    public.write_bytes(public_pem(log.public))
    cli = run_cli(
        "prove",
        "--check",
        str(out),
        "--public-key",
        str(public),
        "--checkpoint",
        str(newer),
        env=offline_env(),
        cwd=tmp_path,
    )
    assert cli.returncode == 1, cli.stdout + cli.stderr
    assert cli.stdout.startswith(f"STALE: saga '{names[0]}', 6 rows in tree head {old.size}")
    assert f"the log has grown to size {new.size}" in cli.stdout
    assert (
        f"tree head {new.size} is consistent with the bundle's tree head {old.size}" in cli.stdout
    )

    # every row is counted past a fault: one flipped row of six still reports six
    rows = out / "rows.jsonl"
    text = rows.read_text()
    flip(rows, len(text[: text.index("tx0") + 2].encode()))
    broken = check_proof_bundle(out, log.public)
    assert broken.verdict is ProofVerdict.FAILED and broken.rows == 6


async def test_a_hundred_row_bundle_with_one_flipped_byte_reports_a_hundred_rows(
    log: Log, tmp_path: Path
) -> None:
    names = sagas(1)
    await log.saga(names[0], calls=50)
    out = tmp_path / "bundle"
    await log.export(out, names)
    journal_file = out / JOURNAL
    original = journal_file.read_bytes()
    lines = original.splitlines(keepends=True)
    assert len(lines) == 100
    start = sum(len(line) for line in lines[:49])  # row seq 50
    for offset in range(start, start + len(lines[49]) - 1):
        flip(journal_file, offset)
        report = verify_bundle(out, public_key=log.public)
        journal_file.write_bytes(original)
        assert report.verdict() is BundleVerdict.FAILED, offset
        # every line is counted: a row that still parses, one that does not, one that now
        # names another saga (and splits the saga's rows in two)
        assert report.rows == 100, offset

    flip(journal_file, start + lines[49].index(b"tx") + 2)
    rewrite_manifest(out)
    public = tmp_path / "log.pub"
    public.write_bytes(public_pem(log.public))
    cli = run_cli(
        "verify", "--bundle", str(out), "--public-key", str(public), env=offline_env(), cwd=tmp_path
    )
    assert cli.returncode == 1
    assert "1 sagas, 100 rows: FAILED" in cli.stdout, cli.stdout
    assert json.loads((out / MANIFEST).read_text())["sagas"][0]["rows"] == 100
