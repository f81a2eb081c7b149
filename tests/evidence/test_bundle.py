"""Export bundles: exported from real Postgres, verified offline, and every alteration caught."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.bundle import MANIFEST, export_bundle, verify_bundle
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter, log_name
from sagacity.evidence.report import Agreement, Source
from sagacity.store import JournalStore
from tests.evidence.conftest import anchored_saga

SAGACITY = Path(sys.executable).parent / "sagacity"


def offline_env() -> dict[str, str]:
    """The environment minus every way to reach a database or Temporal."""
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


@pytest.fixture
async def bundle(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    saga_id: str,
    tmp_path: Path,
) -> Path:
    await anchored_saga(journal, writer, saga_id)
    await anchored_saga(journal, writer, saga_id + "-b", calls=1)
    out = tmp_path / "bundle"
    await export_bundle(journal, out, [saga_id, saga_id + "-b"], checkpoints=checkpoints)
    return out


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
    result = json.loads(exported.stdout)
    assert (result["sagas"], result["rows"]) == (1, 6)

    # the auditor's machine: a copy of the folder, no database, no Temporal, no settings
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    copy = auditor / "evidence"
    shutil.copytree(tmp_path / "out", copy)
    ok = run_cli("verify", "--bundle", str(copy), env=offline_env(), cwd=auditor)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    assert f"checkpoint key {result['key_id']}" in ok.stdout
    assert "1 sagas, 6 rows: all verified" in ok.stdout
    digest = hashlib.sha256((copy / MANIFEST).read_bytes()).hexdigest()
    assert digest == result["manifest_sha256"]

    journal_file = copy / "journal.jsonl"
    text = journal_file.read_text(encoding="utf-8")
    flip(journal_file, len(text[: text.index("tx1") + 2].encode()))  # tx1 becomes tx0
    broken = run_cli("verify", "--bundle", str(copy), "--json", env=offline_env(), cwd=auditor)
    assert broken.returncode == 1
    lines = [json.loads(line) for line in broken.stdout.splitlines()]
    (saga,) = [line for line in lines if "saga_id" in line]
    assert saga["saga_id"] == saga_id and not saga["ok"]
    assert saga["problem"] == {
        "seq": 4,
        "fault": "hash_mismatch",
        "detail": saga["problem"]["detail"],
    }
    (problem,) = lines[-1]["summary"]["problems"]
    assert problem.startswith("journal.jsonl: SHA-256 is") and "changed after export" in problem


@pytest.mark.parametrize("name", ["journal.jsonl", "manifest.json", "checkpoint", "public_key.pem"])
def test_one_flipped_byte_anywhere_fails_with_the_reason(
    bundle: Path, saga_id: str, name: str
) -> None:
    target = bundle / ("checkpoints/" + log_name(saga_id) if name == "checkpoint" else name)
    flip(target, target.stat().st_size // 2)

    report = verify_bundle(bundle)

    assert not report.ok
    reasons = report.problems + [f.detail for s in report.sagas for f in s.faults()]
    blamed = "manifest" if name == MANIFEST else target.name
    assert any(blamed in reason for reason in reasons), reasons


async def test_a_consistently_rewritten_bundle_is_caught_by_its_checkpoints(
    bundle: Path, saga_id: str
) -> None:
    # the attacker drops the last two rows and rewrites the manifest to match: only the
    # signed checkpoints in the bundle still know the saga had six rows
    journal_file = bundle / "journal.jsonl"
    rows = journal_file.read_text().splitlines()
    kept = [
        r for r in rows if not (json.loads(r)["saga_id"] == saga_id and json.loads(r)["seq"] > 4)
    ]
    journal_file.write_text("\n".join(kept) + "\n")
    manifest = json.loads((bundle / MANIFEST).read_text())
    for saga in manifest["sagas"]:
        if saga["saga_id"] == saga_id:
            saga.update(rows=4, head_seq=4, head_hash=json.loads(kept[3])["hash"])
    digest = hashlib.sha256(journal_file.read_bytes()).hexdigest()
    manifest["files"]["journal.jsonl"] = {"sha256": digest, "bytes": journal_file.stat().st_size}
    (bundle / MANIFEST).write_text(json.dumps(manifest))

    report = verify_bundle(bundle)

    assert report.problems == []
    (saga,) = [s for s in report.sagas if s.saga_id == saga_id]
    (fault,) = saga.faults()
    assert (fault.source, fault.agreement, fault.seq) == (
        Source.CHECKPOINT,
        Agreement.DISAGREES,
        5,
    )
    assert "rows were removed" in fault.detail


def test_a_key_other_than_the_trusted_one_fails(bundle: Path) -> None:
    stranger = Ed25519PrivateKey.generate().public_key()

    report = verify_bundle(bundle, public_key=stranger)

    assert any("not the key you trust" in p for p in report.problems)
    assert all(not s.ok for s in report.sagas)


async def test_a_tampered_saga_exports_as_is_and_the_bundle_says_so(
    journal: JournalStore,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    owner: psycopg.AsyncConnection,
    saga_id: str,
    tmp_path: Path,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    await owner.execute(
        "UPDATE side_effect_journal SET payload = '' WHERE saga_id = %s AND seq = 2", (saga_id,)
    )
    await export_bundle(journal, tmp_path / "b", [saga_id], checkpoints=checkpoints)

    report = verify_bundle(tmp_path / "b")

    assert report.problems == []
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
