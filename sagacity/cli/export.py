"""``sagacity export``: write sagas to an evidence bundle (and, with ``--purge``, retention).

``sagacity keygen`` makes the Ed25519 key pair that signs checkpoints.
"""

from __future__ import annotations

import asyncio
import json
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated, Any

import typer
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.cli._common import duration_or_exit, fail, settings_or_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.errors import SagacityError
from sagacity.evidence.bundle import NO_CHECKPOINTS, NO_SIGNATURE, manifest_digest
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.export import export_bundle
from sagacity.evidence.heads import LogSnapshot
from sagacity.evidence.keys import (
    generate_fingerprint_key,
    generate_key,
    key_id,
    load_private_key,
    public_pem,
    verifying_key,
)
from sagacity.evidence.retention import run_retention
from sagacity.evidence.tlog import HeadLog
from sagacity.store.db import open_pool
from sagacity.store.journal import JournalStore
from sagacity.store.retention import RetentionStore
from sagacity.store.tlog import TlogStore

__all__ = ["export", "keygen"]


async def _export(
    url: str,
    out: Path,
    sagas: list[str],
    since: datetime | None,
    until: datetime | None,
    checkpoints: CheckpointDir | None,
    signing_key: Ed25519PrivateKey | None,
    keyring: Path | None,
) -> dict[str, Any]:
    pool = await open_pool(url, max_size=2)
    try:
        journal = JournalStore(pool)
        chosen = sagas or await journal.saga_ids(since=since, until=until)
        note = {
            name: None if at is None else at.isoformat()
            for name, at in (("since", since), ("until", until))
        }
        # the log's newest head dates the bundle and proves its sagas are the log's
        log = (
            None
            if checkpoints is None
            else LogSnapshot.latest(HeadLog(checkpoints.path, checkpoints.key), TlogStore(pool))
        )
        return await export_bundle(
            journal,
            out,
            chosen,
            checkpoints=checkpoints,
            signing_key=signing_key,
            note=note,
            keyring=keyring,
            log=log,
        )
    finally:
        await pool.close()


def _unanchored(manifest: dict[str, Any]) -> list[str]:
    """What the bundle's missing anchors will leave undetectable, for the exporter to hear now."""
    found = []
    if "checkpoints" not in manifest["anchors"]:
        found.append(
            "no checkpoints (SAGACITY_CHECKPOINT_DIR and a key are not both set): "
            f"for every saga, {NO_CHECKPOINTS}"
        )
    else:
        bare = [s["saga_id"] for s in manifest["sagas"] if s["rows"] and not s["checkpointed"]]
        if bare:
            names = ", ".join(repr(s) for s in bare[:5]) + (" …" if len(bare) > 5 else "")
            found.append(f"{len(bare)} sagas have no checkpoint log ({names}): {NO_CHECKPOINTS}")
    if "signature" not in manifest["anchors"]:
        found.append(f"no signing key (SAGACITY_SIGNING_KEY): {NO_SIGNATURE}")
    return found


async def _retain(
    url: str,
    out: Path,
    older_than: timedelta,
    writer: CheckpointWriter | None,
    keyring: Path | None,
) -> dict[str, Any]:
    pool = await open_pool(url, max_size=2)
    try:
        run = await run_retention(
            JournalStore(pool),
            RetentionStore(pool),
            out,
            older_than=older_than,
            checkpoints=writer,
            keyring=keyring,
        )
    finally:
        await pool.close()
    return {
        "cutoff": run.cutoff.isoformat(),
        "bundle": None if run.bundle is None else str(run.bundle),
        "manifest_sha256": run.manifest_sha256,
        "purged": run.purged,
        "kept": run.kept,
    }


def export(
    out: Annotated[
        Path,
        typer.Option("--out", help="New (or empty) folder for the bundle.", show_default=False),
    ],
    sagas: Annotated[
        list[str] | None, typer.Argument(help="Saga ids to export.", show_default=False)
    ] = None,
    since: Annotated[
        datetime | None, typer.Option("--since", help="Sagas with a row at or after (UTC).")
    ] = None,
    until: Annotated[
        datetime | None, typer.Option("--until", help="Sagas with a row before (UTC).")
    ] = None,
    purge: Annotated[
        bool,
        typer.Option(
            "--purge",
            help="Retention: export sagas idle for --older-than, verify the bundle, then delete "
            "them (connect as a member of sagacity_retention).",
        ),
    ] = False,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            help="With --purge: idle period, ISO 8601 or seconds (default: SAGACITY_RETENTION_PERIOD).",
        ),
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Journal database (default: SAGACITY_DATABASE_URL)."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Export sagas, with their signed checkpoints, as a bundle `sagacity verify --bundle` checks offline.

    The manifest is signed when SAGACITY_SIGNING_KEY is set. With checkpoints, the transparency
    log's newest tree head (with its witnesses' cosignatures) goes in too, with each saga's
    inclusion proof in it. A bundle without checkpoints or without that signature is
    unanchored: a warning says what it cannot show, and verifiers refuse it unless given
    --allow-unanchored.
    """
    settings = settings_or_exit()
    if purge and (sagas or since or until):
        raise fail(
            "--purge picks sagas by --older-than; it takes no saga ids or --since/--until", 2
        )
    if not purge and not (sagas or since or until):
        raise fail("name sagas, or give --since/--until, or --purge for retention", 2)
    if older_than is not None and not purge:
        raise fail("--older-than goes with --purge", 2)
    url = journal_url_or_exit(database_url)
    try:
        if purge:
            writer = CheckpointWriter.open(settings.checkpoint_dir, settings.signing_key)
            period = (
                settings.retention_period
                if older_than is None
                else duration_or_exit("--older-than", older_than)
            )
            result = asyncio.run(_retain(url, out, period, writer, settings.keyring))
        else:
            key = verifying_key(settings.checkpoint_public_key, settings.signing_key)
            folder = settings.checkpoint_dir
            checkpoints = None if folder is None or key is None else CheckpointDir(folder, key)
            signer = (
                None if settings.signing_key is None else load_private_key(settings.signing_key)
            )
            manifest = asyncio.run(
                _export(
                    url, out, list(sagas or []), since, until, checkpoints, signer, settings.keyring
                )
            )
            rows = sum(s["rows"] for s in manifest["sagas"])
            result = {
                "bundle": str(out),
                "manifest_sha256": manifest_digest(out),
                "sagas": len(manifest["sagas"]),
                "rows": rows,
                "key_id": manifest["key_id"],
                "anchors": manifest["anchors"],
                "tree_head": manifest.get("tlog"),
                "unanchored": _unanchored(manifest),
            }
    except SagacityError as exc:
        raise fail(str(exc), 1) from None
    for warning in result.get("unanchored", []):
        # verifiers will refuse this bundle without --allow-unanchored: say so at export time
        typer.echo(f"warning: UNANCHORED bundle: {warning}", err=True)
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    elif purge:
        _print_retention(result)
    else:
        typer.echo(
            f"exported {result['sagas']} sagas ({result['rows']} rows) to {out}\n"
            f"manifest sha256 {result['manifest_sha256']}"
        )
        head = result.get("tree_head")
        if head:
            typer.echo(
                f"with tree head {head['size']} of {head['origin']} "
                f"(published {head['published_at']}) and each saga's inclusion proof in it"
            )


def _print_retention(result: dict[str, Any]) -> None:
    if result["bundle"] is None:
        typer.echo(f"nothing idle since before {result['cutoff']}: nothing exported or purged")
        return
    purged = result["purged"]
    typer.echo(
        f"exported to {result['bundle']} (manifest sha256 {result['manifest_sha256']}); "
        f"purged {len(purged)} sagas, {sum(purged.values())} rows"
    )
    for saga_id, why in result["kept"].items():
        typer.echo(f"kept {saga_id}: {why}")


def keygen(
    path: Annotated[Path, typer.Argument(help="Where to write the private key (PEM, mode 0600).")],
    fingerprint: Annotated[
        bool,
        typer.Option(
            "--fingerprint",
            help="Create the secret key redaction fingerprints are keyed with instead "
            "(hex, mode 0600; SAGACITY_REDACT_KEY).",
        ),
    ] = False,
) -> None:
    """Create the Ed25519 key that signs checkpoints, and its public half (PATH.pub)."""
    try:
        if fingerprint:
            made = generate_fingerprint_key(path)
            typer.echo(
                f"fingerprint key: {path} (set SAGACITY_REDACT_KEY on workers; keep it secret)\n"
                f"key id:          {made.id}"
            )
            return
        key = generate_key(path)
    except SagacityError as exc:
        raise fail(str(exc), 1) from None
    public = path.with_name(path.name + ".pub")
    public.write_bytes(public_pem(key.public_key()))
    typer.echo(
        f"signing key: {path} (set SAGACITY_SIGNING_KEY on workers; keep it from the DB's owners)\n"
        f"public key:  {public} (give it to verifiers: SAGACITY_CHECKPOINT_PUBLIC_KEY)\n"
        f"fingerprint: {key_id(key.public_key())}"
    )
