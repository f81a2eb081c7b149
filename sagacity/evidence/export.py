"""Writing evidence bundles: the rows of chosen sagas, their anchors, and a signed manifest.

:func:`export_bundle` writes the folder :mod:`sagacity.evidence.bundle` verifies (its docstring
and ``docs/evidence.md`` give the layout and every field). It reads the journal, and the
transparency log when given one; the verifier needs neither.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Iterable
from contextlib import aclosing
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.bundle import (
    CHECKPOINTS,
    FORMAT,
    JOURNAL,
    KEYRING,
    MANIFEST,
    PUBLIC_KEY,
    SIGNATURE,
    SIGNATURE_DOMAIN,
    VERSION,
    entry_line,
    file_sha256,
)
from sagacity.evidence.bundle_head import HEAD, LOG_PROOFS
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.heads import open_head
from sagacity.evidence.keys import key_id, public_pem
from sagacity.journal import format_timestamp, to_json

if TYPE_CHECKING:
    from sagacity.evidence.heads import LogSnapshot
    from sagacity.store.journal import JournalStore

__all__ = ["export_bundle"]


def _signature_file(key: Ed25519PrivateKey, manifest: bytes) -> str:
    signature = key.sign(SIGNATURE_DOMAIN + manifest)
    body = {"key_id": key_id(key.public_key()), "signature": base64.b64encode(signature).decode()}
    return to_json(body) + "\n"


async def export_bundle(
    journal: JournalStore,
    out: Path,
    saga_ids: Iterable[str],
    *,
    checkpoints: CheckpointDir | None = None,
    signing_key: Ed25519PrivateKey | None = None,
    note: dict[str, Any] | None = None,
    keyring: Path | None = None,
    log: LogSnapshot | None = None,
) -> dict[str, Any]:
    """Write the rows of ``saga_ids`` (and their checkpoints) as a bundle in ``out``; return the manifest.

    The manifest lists the anchors the bundle carries (``checkpoints``, ``signature``; none:
    unanchored) and, per saga, whether it has a checkpoint log. ``signing_key`` signs the
    manifest; it must be the key the checkpoints are signed with. ``keyring`` (the decision
    keyring's file) is copied in, so decisions' signatures can be checked offline; the manifest
    covers it like every file. ``log`` (the transparency log's newest head, which must be signed
    with the same key) is copied in with, per saga, the inclusion proof of its last exported row
    that head holds. Rows are exported as stored, broken chains included: evidence of tampering
    is evidence too. ``out`` must not exist yet, or be an empty directory.
    """
    key = checkpoints.key if checkpoints is not None else None
    if signing_key is not None:
        if key is not None and key_id(key) != key_id(signing_key.public_key()):
            raise EvidenceUnavailable(
                f"the signing key {key_id(signing_key.public_key())} is not the key the "
                f"checkpoints are checked with ({key_id(key)}): one bundle, one key"
            )
        key = signing_key.public_key()
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvidenceUnavailable(f"{out} exists and is not an empty directory")
    if log is not None:
        _check_log_key(log, key)
    out.mkdir(parents=True, exist_ok=True)
    sagas = []
    with (out / JOURNAL).open("w", encoding="utf-8", newline="\n") as lines:
        for saga_id in sorted(set(saga_ids)):
            rows, last = 0, None
            async with aclosing(journal.stream(saga_id)) as entries:
                async for entry in entries:
                    lines.write(entry_line(entry) + "\n")
                    rows, last = rows + 1, entry
            sagas.append(
                {
                    "saga_id": saga_id,
                    "rows": rows,
                    "head_seq": 0 if last is None else last.seq,
                    "head_hash": None if last is None else last.hash,
                    "checkpointed": False,
                }
            )
    anchors = []
    if checkpoints is not None:
        anchors.append("checkpoints")
        (out / CHECKPOINTS).mkdir()
        for saga in sagas:
            source = checkpoints.log_path(str(saga["saga_id"]))
            if source.is_file():
                shutil.copyfile(source, out / CHECKPOINTS / source.name)
                saga["checkpointed"] = True
    summary = None
    if log is not None:
        anchors.append("tlog")
        summary = await _export_head(log, out, sagas)
    if signing_key is not None:
        anchors.append("signature")
    if key is not None:
        (out / PUBLIC_KEY).write_bytes(public_pem(key))
    if keyring is not None:
        shutil.copyfile(keyring, out / KEYRING)
    files = {
        path.relative_to(out).as_posix(): {
            "sha256": file_sha256(path),
            "bytes": path.stat().st_size,
        }
        for path in sorted(out.rglob("*"))
        if path.is_file()
    }
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "created_at": format_timestamp(datetime.now(UTC)),
        "hash_rules": "sagacity-journal-v1",
        "key_id": None if key is None else key_id(key),
        "anchors": anchors,
        "note": note or {},
        "sagas": sagas,
        **({} if summary is None else {"tlog": summary}),
        "files": files,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (out / MANIFEST).write_text(text, encoding="utf-8")
    if signing_key is not None:
        (out / SIGNATURE).write_text(
            _signature_file(signing_key, text.encode("utf-8")), encoding="utf-8"
        )
    return manifest


def _check_log_key(log: LogSnapshot, key: Ed25519PublicKey | None) -> None:
    """A bundle has one key: the log's head must be signed by the one its checkpoints are."""
    if key is None:
        raise EvidenceUnavailable(
            "the log's tree head goes in a bundle only with the key it is signed with "
            "(set SAGACITY_CHECKPOINT_PUBLIC_KEY or SAGACITY_SIGNING_KEY)"
        )
    try:
        open_head(log.note, key)
    except ValueError as exc:
        raise EvidenceUnavailable(
            f"the log's tree head is not signed by the bundle's key {key_id(key)}: {exc}"
        ) from None


async def _export_head(log: LogSnapshot, out: Path, sagas: list[dict[str, Any]]) -> dict[str, Any]:
    """Write the head and each saga's inclusion proof; the manifest's ``tlog`` summary."""
    (out / HEAD).parent.mkdir()
    (out / HEAD).write_text(log.note, encoding="utf-8")
    with (out / LOG_PROOFS).open("w", encoding="utf-8", newline="\n") as lines:
        for saga in sagas:
            proof = await log.proof(str(saga["saga_id"]), int(saga["head_seq"]))
            if proof is not None:
                lines.write(to_json({"saga_id": saga["saga_id"], **proof.fields()}) + "\n")
    return {
        "origin": log.head.origin,
        "size": log.head.size,
        "root": base64.b64encode(log.head.root).decode("ascii"),
        "published_at": format_timestamp(log.published_at),
    }
