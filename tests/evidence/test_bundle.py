"""Export bundles: exported from real Postgres, verified offline, and every alteration caught.

The attacker holds the bundle and its format (this file's helpers rewrite manifests, digests and
signatures the way anyone can), but not the journal's signing key.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity.evidence.bundle import (
    CHECKPOINTS,
    JOURNAL,
    MANIFEST,
    NO_CHECKPOINTS,
    NO_SIGNATURE,
    PUBLIC_KEY,
    SIGNATURE,
    BundleReport,
    BundleVerdict,
    verify_bundle,
)
from sagacity.evidence.checkpoints import (
    CheckpointDir,
    CheckpointWriter,
    log_name,
    parse_line,
    sign,
)
from sagacity.evidence.export import export_bundle
from sagacity.evidence.keys import key_id, public_pem
from sagacity.evidence.report import Agreement, Source
from sagacity.journal import to_json
from sagacity.store import JournalStore
from tests.evidence.conftest import anchored_saga

SAGACITY = Path(sys.executable).parent / "sagacity"


def offline_env() -> dict[str, str]:
    """The environment minus every way to reach a database or Temporal, and every setting."""
    return {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("SAGACITY_", "TEMPORAL_", "PG", "DATABASE"))
    }


def run_cli(*args: str, env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(SAGACITY), *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def flip(path: Path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x01
    path.write_bytes(bytes(data))


def reasons(report: BundleReport) -> list[str]:
    """Every fault verification named: file-level problems, then each saga's faults."""
    return report.problems + [
        f"saga {s.saga_id!r} {f.source} seq {f.seq}: {f.detail}"
        for s in report.sagas
        for f in s.faults()
    ]


def rewrite_manifest(
    bundle: Path, change: Callable[[dict[str, Any]], None] = lambda m: None
) -> None:
    """The attacker's fix-up: edit the manifest, then list every file with fresh digests."""
    manifest = json.loads((bundle / MANIFEST).read_text())
    change(manifest)
    manifest["files"] = {
        p.relative_to(bundle).as_posix(): {"sha256": sha256(p), "bytes": p.stat().st_size}
        for p in sorted(bundle.rglob("*"))
        if p.is_file() and p.name not in (MANIFEST, SIGNATURE)
    }
    (bundle / MANIFEST).write_text(json.dumps(manifest, indent=2))


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def drop_rows_after(bundle: Path, saga_id: str, seq: int) -> None:
    """Cut a saga's tail from journal.jsonl and make the manifest's head agree."""
    journal_file = bundle / JOURNAL
    rows = [json.loads(line) for line in journal_file.read_text().splitlines()]
    kept = [r for r in rows if not (r["saga_id"] == saga_id and r["seq"] > seq)]
    journal_file.write_text("".join(to_json(r) + "\n" for r in kept))
    head = [r for r in kept if r["saga_id"] == saga_id][-1]

    def fix(manifest: dict[str, Any]) -> None:
        for saga in manifest["sagas"]:
            if saga["saga_id"] == saga_id:
                saga.update(rows=seq, head_seq=seq, head_hash=head["hash"])

    rewrite_manifest(bundle, fix)


def strip_anchors(bundle: Path) -> None:
    """Remove checkpoints, key and signature, and make the manifest say it never had them."""
    shutil.rmtree(bundle / CHECKPOINTS)
    (bundle / PUBLIC_KEY).unlink()
    (bundle / SIGNATURE).unlink()

    def fix(manifest: dict[str, Any]) -> None:
        manifest.update(anchors=[], key_id=None)
        for saga in manifest["sagas"]:
            saga["checkpointed"] = False

    rewrite_manifest(bundle, fix)


def resign(bundle: Path, key: Ed25519PrivateKey) -> None:
    """Re-sign every checkpoint and the manifest with ``key``, and ship its public half."""
    for log in (bundle / CHECKPOINTS).iterdir():
        lines = []
        for line in log.read_text().splitlines():
            cp = parse_line(line)
            signed = sign(key, cp.saga_id, cp.seq, cp.hash, kind=cp.kind, bundle=cp.bundle)
            lines.append(signed.line() + "\n")
        log.write_text("".join(lines))
    (bundle / PUBLIC_KEY).write_bytes(public_pem(key.public_key()))
    rewrite_manifest(bundle, lambda m: m.update(key_id=key_id(key.public_key())))
    manifest = (bundle / MANIFEST).read_bytes()
    signature = key.sign(b"sagacity-bundle-v2\n" + manifest)
    body = {"key_id": key_id(key.public_key()), "signature": base64.b64encode(signature).decode()}
    (bundle / SIGNATURE).write_text(to_json(body) + "\n")


@pytest.fixture
def trusted(checkpoints: CheckpointDir) -> Ed25519PublicKey:
    """The key the auditor was given out of band: the workers' checkpoint key."""
    return checkpoints.key


@pytest.fixture
async def bundle(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    saga_id: str,
    tmp_path: Path,
) -> Path:
    """Two checkpointed sagas (6 and 2 rows), exported with checkpoints and a signed manifest."""
    await anchored_saga(journal, writer, saga_id)
    await anchored_saga(journal, writer, saga_id + "-b", calls=1)
    out = tmp_path / "bundle"
    await export_bundle(
        journal, out, [saga_id, saga_id + "-b"], checkpoints=checkpoints, signing_key=writer.key
    )
    return out


def test_an_untouched_bundle_verifies_only_against_the_trusted_key(
    bundle: Path, trusted: Ed25519PublicKey
) -> None:
    report = verify_bundle(bundle, public_key=trusted)
    assert report.verdict() is BundleVerdict.VERIFIED and report.ok, reasons(report)
    assert report.unanchored == [] and report.trusted

    unpinned = verify_bundle(bundle)
    assert reasons(unpinned) == [] and unpinned.unanchored == []
    assert unpinned.verdict() is BundleVerdict.UNTRUSTED and not unpinned.ok
    assert unpinned.key_id == key_id(trusted)
    assert BundleVerdict.UNTRUSTED.exit_code == 3


async def test_cli_export_then_offline_verify_in_another_folder(
    database_url: str,
    journal: JournalStore,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
    tmp_path: Path,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    env = {
        **offline_env(),
        "SAGACITY_DATABASE_URL": database_url,
        "SAGACITY_CHECKPOINT_DIR": str(writer.path),
        "SAGACITY_SIGNING_KEY": str(signing_key),
    }
    exported = run_cli(
        "export", saga_id, "--out", str(tmp_path / "out"), "--json", env=env, cwd=tmp_path
    )
    assert exported.returncode == 0, exported.stderr
    assert "warning" not in exported.stderr
    result = json.loads(exported.stdout)
    assert (result["sagas"], result["rows"], result["anchors"]) == (
        1,
        6,
        ["checkpoints", "signature"],
    )
    assert result["unanchored"] == []

    # the auditor's machine: a copy of the folder and the public key, nothing else
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    copy = auditor / "evidence"
    shutil.copytree(tmp_path / "out", copy)
    public = auditor / "journal-key.pub"
    public.write_bytes(public_pem(writer.key.public_key()))
    ok = run_cli(
        "verify", "--bundle", str(copy), "--public-key", str(public), env=offline_env(), cwd=auditor
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"trusted key {result['key_id']}" in ok.stdout
    assert "1 sagas, 6 rows: VERIFIED: every file" in ok.stdout
    assert sha256(copy / MANIFEST) == result["manifest_sha256"]

    # the same bundle with no trusted key: consistent, but that proves nothing
    untrusted = run_cli("verify", "--bundle", str(copy), env=offline_env(), cwd=auditor)
    assert untrusted.returncode == 3, untrusted.stdout + untrusted.stderr
    assert f"UNTRUSTED: consistent with the bundle's own key {result['key_id']}" in untrusted.stdout
    assert "VERIFIED" not in untrusted.stdout and "all verified" not in untrusted.stdout
    # the key may come from the setting instead of the flag
    from_setting = run_cli(
        "verify",
        "--bundle",
        str(copy),
        env={**offline_env(), "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(public)},
        cwd=auditor,
    )
    assert from_setting.returncode == 0, from_setting.stdout + from_setting.stderr

    journal_file = copy / JOURNAL
    text = journal_file.read_text(encoding="utf-8")
    flip(journal_file, len(text[: text.index("tx1") + 2].encode()))  # tx1 becomes tx0
    rewrite_manifest(copy)  # the digests agree again; the manifest's signature no longer does
    broken = run_cli(
        "verify",
        "--bundle",
        str(copy),
        "--public-key",
        str(public),
        "--json",
        env=offline_env(),
        cwd=auditor,
    )
    assert broken.returncode == 1
    lines = [json.loads(line) for line in broken.stdout.splitlines()]
    (saga,) = [line for line in lines if "saga_id" in line]
    assert saga["saga_id"] == saga_id and not saga["ok"]
    assert (saga["problem"]["seq"], saga["problem"]["fault"]) == (4, "hash_mismatch")
    summary = lines[-1]["summary"]
    assert (summary["verdict"], summary["exit"], summary["trusted"]) == ("FAILED", 1, True)
    (problem,) = summary["problems"]
    assert problem.startswith(f"{SIGNATURE}: the signature does not verify")


FILES = [JOURNAL, MANIFEST, SIGNATURE, "checkpoint", PUBLIC_KEY]


@pytest.mark.parametrize("name", FILES)
def test_every_single_flipped_byte_fails_naming_the_file(
    bundle: Path, saga_id: str, trusted: Ed25519PublicKey, name: str
) -> None:
    target = bundle / (f"{CHECKPOINTS}/{log_name(saga_id)}" if name == "checkpoint" else name)
    original = target.read_bytes()
    # the manifest's digest names its file; the signature file is named by its own check
    blamed = target.name
    for offset in range(len(original)):
        flip(target, offset)
        report = verify_bundle(bundle, public_key=trusted)
        target.write_bytes(original)
        assert report.verdict() is BundleVerdict.FAILED, offset
        assert any(blamed in reason for reason in reasons(report)), (offset, reasons(report))


def test_a_flipped_row_byte_is_named_by_saga_and_seq_even_with_the_digests_fixed(
    bundle: Path, saga_id: str, trusted: Ed25519PublicKey
) -> None:
    journal_file = bundle / JOURNAL
    original = journal_file.read_bytes()
    lines = original.splitlines(keepends=True)
    start = sum(len(line) for line in lines[:3])  # row seq 4 of the first saga
    for offset in range(start, start + len(lines[3])):
        flip(journal_file, offset)
        rewrite_manifest(bundle)
        report = verify_bundle(bundle, public_key=trusted)
        journal_file.write_bytes(original)
        found = reasons(report)
        assert report.verdict() is BundleVerdict.FAILED, offset
        assert any(r.startswith(f"{SIGNATURE}: the signature does not verify") for r in found)
        # a row that still parses breaks its saga's chain at seq 4 (or, its seq changed, near
        # it); one that does not is named by its line and the row before it
        named = [r for r in found if repr(saga_id) in r and ("seq 4" in r or "seq 3" in r)]
        assert named, (offset, found)


async def test_dropped_rows_with_the_manifest_fixed_are_caught_by_signature_and_checkpoints(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    bundle: Path,
    saga_id: str,
    trusted: Ed25519PublicKey,
    tmp_path: Path,
) -> None:
    drop_rows_after(bundle, saga_id, 4)

    report = verify_bundle(bundle, public_key=trusted)

    assert report.verdict() is BundleVerdict.FAILED
    assert report.problems == [
        f"{SIGNATURE}: the signature does not verify with the key you trust {key_id(trusted)}: "
        f"{MANIFEST} or {SIGNATURE} was changed after export"
    ]
    (saga,) = [s for s in report.sagas if s.saga_id == saga_id]
    (fault,) = saga.faults()
    assert (fault.source, fault.agreement, fault.seq) == (Source.CHECKPOINT, Agreement.DISAGREES, 5)
    assert "rows were removed" in fault.detail

    # exported without the signing key, the checkpoints alone still catch it
    unsigned = tmp_path / "unsigned"
    await export_bundle(journal, unsigned, [saga_id], checkpoints=checkpoints)
    drop_rows_after(unsigned, saga_id, 4)
    alone = verify_bundle(unsigned, public_key=trusted)
    assert alone.problems == [] and alone.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    (fault,) = alone.sagas[0].faults()
    assert (fault.source, fault.seq) == (Source.CHECKPOINT, 5)


def test_stripped_anchors_and_dropped_rows_are_refused_as_unanchored(
    bundle: Path, saga_id: str, trusted: Ed25519PublicKey
) -> None:
    # the auditor's case: checkpoints, key and signature removed, two rows dropped, the
    # manifest made to agree with all of it
    strip_anchors(bundle)
    drop_rows_after(bundle, saga_id, 4)

    report = verify_bundle(bundle, public_key=trusted)

    assert reasons(report) == []
    assert report.verdict() is BundleVerdict.UNANCHORED and not report.ok
    assert BundleVerdict.UNANCHORED.exit_code == 1
    assert report.unanchored == [
        NO_SIGNATURE,
        f"no signed checkpoint for sagas {saga_id!r}, {saga_id + '-b'!r}: {NO_CHECKPOINTS}",
    ]
    # accepted only when asked, and then what it cannot show is said
    assert report.verdict(allow_unanchored=True) is BundleVerdict.VERIFIED_UNANCHORED
    assert verify_bundle(bundle).verdict(allow_unanchored=True) is BundleVerdict.UNTRUSTED


def test_checkpoints_stripped_behind_the_manifests_back_fail(
    bundle: Path, trusted: Ed25519PublicKey
) -> None:
    shutil.rmtree(bundle / CHECKPOINTS)

    report = verify_bundle(bundle, public_key=trusted)

    assert report.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    assert f"{CHECKPOINTS}: the manifest says the bundle has signed checkpoints" in " ".join(
        report.problems
    )
    assert any("listed in the manifest but missing" in p for p in report.problems)


def test_one_sagas_checkpoint_log_stripped_is_unanchored_and_breaks_the_signature(
    bundle: Path, saga_id: str, trusted: Ed25519PublicKey
) -> None:
    (bundle / CHECKPOINTS / log_name(saga_id)).unlink()
    rewrite_manifest(bundle)

    report = verify_bundle(bundle, public_key=trusted)

    assert report.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    assert report.problems[0].startswith(f"{SIGNATURE}: the signature does not verify")
    assert f"no signed checkpoint for saga {saga_id!r}: {NO_CHECKPOINTS}" in report.unanchored


@pytest.mark.parametrize("pinned", [True, False])
def test_a_stripped_public_key_fails(bundle: Path, trusted: Ed25519PublicKey, pinned: bool) -> None:
    (bundle / PUBLIC_KEY).unlink()
    rewrite_manifest(bundle)

    report = verify_bundle(bundle, public_key=trusted if pinned else None)

    assert report.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    expected = (
        f"{SIGNATURE}: the signature does not verify"
        if pinned
        else f"{PUBLIC_KEY}: missing, and no trusted key was given"
    )
    assert any(p.startswith(expected) for p in report.problems), report.problems


def test_a_bundle_re_signed_with_another_key_is_untrusted_without_the_key_and_fails_with_it(
    bundle: Path, trusted: Ed25519PublicKey
) -> None:
    attacker = Ed25519PrivateKey.generate()
    theirs, ours = key_id(attacker.public_key()), key_id(trusted)
    resign(bundle, attacker)

    # without the trusted key the bundle is consistent with itself, which anyone can arrange
    unpinned = verify_bundle(bundle)
    assert reasons(unpinned) == [] and unpinned.key_id == theirs
    assert unpinned.verdict() is BundleVerdict.UNTRUSTED

    pinned = verify_bundle(bundle, public_key=trusted)
    assert pinned.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    found = reasons(pinned)
    assert f"{PUBLIC_KEY}: the bundle's key {theirs} is not the key you trust ({ours})" in found
    assert f"{SIGNATURE}: signed by key {theirs}, not by the key you trust {ours}" in found
    forged = [r for r in found if f"signed by key {theirs}, not by the trusted key {ours}" in r]
    assert forged, found  # each saga's checkpoints, named by log file and line


async def test_an_unanchored_export_warns_and_verifies_only_when_allowed(
    database_url: str, journal: JournalStore, saga_id: str, signing_key: Path, tmp_path: Path
) -> None:
    await anchored_saga(journal, None, saga_id)
    env = {**offline_env(), "SAGACITY_DATABASE_URL": database_url}
    out = tmp_path / "bare"
    exported = run_cli("export", saga_id, "--out", str(out), env=env, cwd=tmp_path)
    assert exported.returncode == 0, exported.stderr
    assert "warning: UNANCHORED bundle: no checkpoints" in exported.stderr
    assert "warning: UNANCHORED bundle: no signing key" in exported.stderr
    manifest = json.loads((out / MANIFEST).read_text())
    assert (manifest["version"], manifest["anchors"], manifest["key_id"]) == (3, [], None)
    assert [s["checkpointed"] for s in manifest["sagas"]] == [False]

    public = tmp_path / "key.pub"
    public.write_bytes(public_pem(Ed25519PrivateKey.generate().public_key()))
    key = ["--public-key", str(public)]
    refused = run_cli("verify", "--bundle", str(out), *key, env=offline_env(), cwd=tmp_path)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert "1 sagas, 6 rows: UNANCHORED, refused" in refused.stdout
    assert NO_CHECKPOINTS in refused.stdout and NO_SIGNATURE in refused.stdout

    allowed = run_cli(
        "verify", "--bundle", str(out), *key, "--allow-unanchored", env=offline_env(), cwd=tmp_path
    )
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "1 sagas, 6 rows: VERIFIED, UNANCHORED" in allowed.stdout
    assert f"  - no signed checkpoint for saga {saga_id!r}: {NO_CHECKPOINTS}" in allowed.stdout

    no_key = run_cli(
        "verify", "--bundle", str(out), "--allow-unanchored", env=offline_env(), cwd=tmp_path
    )
    assert no_key.returncode == 3, no_key.stdout + no_key.stderr
    assert "UNTRUSTED" in no_key.stdout


@pytest.mark.parametrize(
    "field, value",
    [("anchors", 5), ("anchors", [None]), ("sagas", {"a": 1}), ("sagas", ["a"]), ("files", [])],
)
def test_a_manifest_of_the_wrong_shape_fails_without_a_traceback(
    bundle: Path, trusted: Ed25519PublicKey, field: str, value: object
) -> None:
    rewrite_manifest(bundle)
    manifest = json.loads((bundle / MANIFEST).read_text())
    manifest[field] = value
    (bundle / MANIFEST).write_text(json.dumps(manifest))

    report = verify_bundle(bundle, public_key=trusted)

    assert report.verdict(allow_unanchored=True) is BundleVerdict.FAILED
    assert report.problems[0].startswith(f"{MANIFEST}: {field} is not")


def test_a_version_1_bundle_is_still_read_as_unsigned(
    bundle: Path, trusted: Ed25519PublicKey
) -> None:
    (bundle / SIGNATURE).unlink()

    def downgrade(manifest: dict[str, Any]) -> None:
        manifest["version"] = 1
        del manifest["anchors"]
        for saga in manifest["sagas"]:
            del saga["checkpointed"]

    rewrite_manifest(bundle, downgrade)

    report = verify_bundle(bundle, public_key=trusted)

    assert reasons(report) == [] and report.unanchored == [NO_SIGNATURE]
    assert report.verdict() is BundleVerdict.UNANCHORED
    assert report.verdict(allow_unanchored=True) is BundleVerdict.VERIFIED_UNANCHORED


async def test_a_tampered_saga_exports_as_is_and_the_bundle_says_so(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    saga_id: str,
    trusted: Ed25519PublicKey,
    tmp_path: Path,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    await owner.execute(
        "UPDATE side_effect_journal SET payload = '' WHERE saga_id = %s AND seq = 2", (saga_id,)
    )
    await export_bundle(
        journal, tmp_path / "b", [saga_id], checkpoints=checkpoints, signing_key=writer.key
    )

    report = verify_bundle(tmp_path / "b", public_key=trusted)

    assert report.problems == [] and report.verdict() is BundleVerdict.FAILED
    (saga,) = report.sagas
    assert saga.verdict.problem is not None and saga.verdict.problem.seq == 2


def test_the_offline_verifier_imports_no_database_or_temporal_code() -> None:
    probe = (
        "import sys, sagacity.evidence.bundle\n"
        "loaded = {m.split('.')[0] for m in sys.modules}\n"
        "print(sorted(loaded & {'psycopg', 'psycopg_pool', 'temporalio', 'httpx', 'fastapi'}))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=offline_env(), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
