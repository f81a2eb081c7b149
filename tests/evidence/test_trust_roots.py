"""Trust roots an insider cannot swap: verification trusts only keys pinned out of band.

The insider here is the tables' owner who can also write every folder the workers write (their
checkpoint folder and their signing key's folder): they rewrite a saga, make a key of their own,
re-sign the saga's checkpoints with it and put it where the workers' key was. Verification that
took its key from beside the data passed that; pinned trust (a trust file kept elsewhere, a
fingerprint, an explicit key) names the re-signed lines, and a key or trust file found in the
workers' folders is refused outright.
"""

from __future__ import annotations

from pathlib import Path

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.checkpoints import CheckpointWriter, log_name
from sagacity.evidence.keys import generate_key, key_id, load_private_key, public_pem
from sagacity.evidence.note import COSIGNATURE_V1, NoteKey
from sagacity.evidence.rotation import ROTATIONS, record_rotation
from sagacity.evidence.trust import TrustedKey, TrustRoots, fingerprint, load_trust, write_trust
from sagacity.store import JournalStore
from tests.evidence.conftest import anchored_saga
from tests.evidence.test_tamper_suite import rewrite
from tests.ops.conftest import Cli


def pinned(folder: Path, writer: CheckpointWriter) -> Path:
    """A trust file pinning the workers' key, in a folder of the auditor's own."""
    folder.mkdir(exist_ok=True)
    path = folder / "trust.json"
    write_trust(path, TrustRoots((TrustedKey("workers", writer.key.public_key()),)))
    return path


def workers_env(writer: CheckpointWriter, signing_key: Path) -> dict[str, str]:
    return {"SAGACITY_CHECKPOINT_DIR": str(writer.path), "SAGACITY_SIGNING_KEY": str(signing_key)}


async def swap_key_and_resign(
    owner: psycopg.AsyncConnection, journal: JournalStore, writer: CheckpointWriter, saga_id: str
) -> tuple[Path, Ed25519PrivateKey]:
    """The insider's attack: rewrite row 2 (chain recomputed), replace the workers' key with one
    of their own (and its public half beside it), re-sign the saga's checkpoint log with it."""
    await rewrite(owner, journal, saga_id, 2, '{"amount": 9999, "to": "Mallory"}')
    keys = writer.path.parent / "insider"
    keys.mkdir()
    own_path = keys / "signing.pem"
    own = generate_key(own_path)
    (keys / "signing.pem.pub").write_bytes(public_pem(own.public_key()))
    (writer.path / log_name(saga_id)).unlink()
    forger = CheckpointWriter(writer.path, own)
    for row in await journal.read(saga_id):
        forger.record(saga_id, row.seq, row.hash)
    return own_path, own


async def test_a_key_swapped_in_the_workers_folders_fails_against_the_pinned_key(
    sagacity: Cli,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
    tmp_path: Path,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    trust = pinned(tmp_path / "auditor", writer)
    real = key_id(writer.key.public_key())
    own_path, own = await swap_key_and_resign(owner, journal, writer, saga_id)

    # the workers' settings now name the insider's key: nothing beside the data is trusted
    env = workers_env(writer, own_path)
    result = await sagacity("verify", saga_id, extra_env={**env, "SAGACITY_TRUST_FILE": str(trust)})
    assert result.code == 1, result.stdout + result.stderr
    assert f"FAILED  {saga_id}" in result.stdout
    assert f"signed by key {key_id(own.public_key())}, not by the trusted key {real}" in (
        result.stdout
    )

    # the insider's public half beside their key, given as the trust root: refused, not used
    beside = {**env, "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(own_path) + ".pub"}
    result = await sagacity("verify", saga_id, extra_env=beside)
    assert result.code == 2
    assert "beside the data it would vouch for" in result.stderr
    assert "no trust root" in result.stderr

    # a trust file dropped into the checkpoint folder is no trust root either
    planted = writer.path / "trust.json"
    write_trust(planted, TrustRoots((TrustedKey("insider", own.public_key()),)))
    result = await sagacity("verify", saga_id, "--trust", str(planted), extra_env=env)
    assert result.code == 2 and "beside the data it would vouch for" in result.stderr

    # the auditor's printed fingerprint of the real key finds no such key among the swapped ones
    result = await sagacity(
        "verify", saga_id, "--fingerprint", fingerprint(writer.key.public_key()), extra_env=env
    )
    assert result.code == 2 and "no key with fingerprint" in result.stderr


async def test_a_fingerprint_pins_the_key_found_beside_the_data(
    sagacity: Cli,
    journal: JournalStore,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    env = workers_env(writer, signing_key)
    printed = fingerprint(writer.key.public_key())
    result = await sagacity("verify", saga_id, "--fingerprint", printed, extra_env=env)
    assert result.code == 0, result.stdout + result.stderr
    assert f"fingerprint {printed}" in result.stderr

    result = await sagacity("verify", saga_id, "--fingerprint", "zz" * 16, extra_env=env)
    assert result.code == 2 and "at least 16 hex digits" in result.stderr


async def test_a_rotation_signed_by_the_old_key_is_followed_and_a_forged_one_is_not(
    sagacity: Cli,
    journal: JournalStore,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
    tmp_path: Path,
) -> None:
    trust = pinned(tmp_path / "auditor", writer)
    (tmp_path / "new").mkdir()
    new_path = tmp_path / "new" / "signing.pem"
    new = generate_key(new_path)
    rotated = await sagacity(
        "anchors", "rotate", str(new_path), extra_env=workers_env(writer, signing_key)
    )
    assert rotated.code == 0, rotated.stderr
    assert "signs from" in rotated.stdout and key_id(new.public_key()) in rotated.stdout

    # the workers now sign with the new key; the auditor's trust file still names only the old
    await anchored_saga(journal, CheckpointWriter(writer.path, load_private_key(new_path)), saga_id)
    env = {**workers_env(writer, new_path), "SAGACITY_TRUST_FILE": str(trust)}
    result = await sagacity("verify", saga_id, extra_env=env)
    assert result.code == 0, result.stdout + result.stderr

    # an insider's own key "rotated to" by a statement their key signed is not trusted
    insider = Ed25519PrivateKey.generate()
    other = Ed25519PrivateKey.generate()
    record_rotation(writer.path, insider, other.public_key())
    forged_saga = saga_id + "-forged"
    await anchored_saga(journal, CheckpointWriter(writer.path, other), forged_saga)
    result = await sagacity("verify", forged_saga, extra_env=env)
    assert result.code == 1
    assert f"{ROTATIONS} line 2: a rotation from key {key_id(insider.public_key())}" in (
        result.stderr
    )
    assert f"signed by key {key_id(other.public_key())}, not by the trusted keys" in result.stdout


async def test_a_bundle_is_verified_against_the_pinned_key_never_its_own(
    sagacity: Cli,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
    tmp_path: Path,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    trust = pinned(tmp_path / "auditor", writer)
    own_path, _ = await swap_key_and_resign(owner, journal, writer, saga_id)
    bundle = tmp_path / "bundle"
    # exported by the insider with their key as the workers' key: manifest and checkpoints
    # signed by it, its public half in the bundle
    exported = await sagacity(
        "export", saga_id, "--out", str(bundle), extra_env=workers_env(writer, own_path)
    )
    assert exported.code == 0, exported.stderr

    result = await sagacity("verify", "--bundle", str(bundle), "--trust", str(trust))
    assert result.code == 1 and "FAILED" in result.stdout
    assert f"not the key you trust ({key_id(writer.key.public_key())})" in result.stdout

    # the bundle's own key, named as the trusted one: refused as found beside the data
    result = await sagacity(
        "verify", "--bundle", str(bundle), "--public-key", str(bundle / "public_key.pem")
    )
    assert result.code == 2 and "beside the data it would vouch for" in result.stderr


async def test_trust_init_pins_signers_and_witnesses_and_show_prints_fingerprints(
    sagacity: Cli, signing_key: Path, tmp_path: Path
) -> None:
    witness = NoteKey("witness.test/w1", Ed25519PrivateKey.generate().public_key(), COSIGNATURE_V1)
    file = tmp_path / "trust.json"
    made = await sagacity(
        "trust", "init", str(file), "--signer", f"workers={signing_key}",
        "--witness", f"{witness.vkey()} http://127.0.0.1:7380",
    )  # fmt: skip
    assert made.code == 0, made.stderr
    signer = load_private_key(signing_key).public_key()
    assert f"signer   workers  fingerprint {fingerprint(signer)}" in made.stdout
    assert f"witness  witness.test/w1  fingerprint {fingerprint(witness.public)}" in made.stdout
    assert "quorum   1 of 1" in made.stdout
    roots = load_trust(file)
    assert roots.witnesses[0].url == "http://127.0.0.1:7380" and file.stat().st_mode & 0o222 == 0

    again = await sagacity("trust", "init", str(file), "--signer", f"workers={signing_key}")
    assert again.code == 2 and "pass --force" in again.stderr
    tampered = witness.vkey()[:-6] + "AAAAAA"
    bad = await sagacity(
        "trust", "init", str(tmp_path / "t2.json"), "--signer", f"w={signing_key}",
        "--witness", tampered,
    )  # fmt: skip
    assert bad.code == 2 and "does not match the key" in bad.stderr
