"""``sagacity anchors``: turn anchors on for a journal kept without them; rotate their key.

With checkpoints configured, ``sagacity verify`` fails every saga that has rows but no checkpoint
(a forged saga looks exactly like that). A journal kept before anchors were on has only such
sagas, so the cut-over signs each one's current head once, as its baseline: from then on rows
removed below that head, or a chain recomputed beneath it, no longer match. What happened to a
saga before its baseline stays as detectable as the chain alone makes it, and no more.

A saga that already has checkpoints is left alone (signing its head again would bless whatever
changed since its last checkpoint), and a saga whose chain does not verify is not signed.

``sagacity anchors rotate NEW_KEY`` signs, with the key in use, that ``NEW_KEY`` signs from now
on (``keys/rotations.jsonl`` in the checkpoint folder): verifiers that pin the old key trust the new
one through it, so the trust file need not change.
"""

from __future__ import annotations

import asyncio
import json
from contextlib import aclosing
from pathlib import Path
from typing import Annotated, Any

import typer

from sagacity.cli._common import settings_or_exit
from sagacity.cli.db import DatabaseUrl, journal_url_or_exit
from sagacity.errors import SagacityError
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.keys import key_id, load_private_key, load_public_key
from sagacity.evidence.rotation import ROTATIONS, record_rotation
from sagacity.store.journal import JournalStore

__all__ = ["app"]

app = typer.Typer(
    name="anchors",
    help="Signed checkpoints: the cut-over for a journal kept without them, key rotation.",
    no_args_is_help=True,
)


async def _baseline(
    url: str, writer: CheckpointWriter, saga_ids: list[str] | None
) -> dict[str, Any]:
    signed: list[dict[str, Any]] = []
    anchored: list[str] = []
    broken: dict[str, str] = {}
    checkpoints = CheckpointDir(writer.path, writer.key.public_key())
    async with (
        await JournalStore.open(url, min_size=1, max_size=1) as journal,
        aclosing(journal.verify_all(saga_ids=saga_ids)) as verdicts,
    ):
        async for verdict in verdicts:
            if checkpoints.load(verdict.saga_id).seqs:
                anchored.append(verdict.saga_id)
            elif verdict.rows == 0:
                broken[verdict.saga_id] = "no rows in the journal"
            elif not verdict.ok:
                assert verdict.problem is not None
                problem = verdict.problem
                broken[verdict.saga_id] = (
                    f"its chain does not verify at seq {problem.seq}: {problem.fault.value}: "
                    f"{problem.detail}"
                )
            else:
                writer.record(verdict.saga_id, verdict.head_seq, verdict.head_hash)
                signed.append({"saga_id": verdict.saga_id, "seq": verdict.head_seq})
    return {
        "key_id": writer.key_id,
        "checkpoint_dir": str(writer.path),
        "signed": signed,
        "already_anchored": anchored,
        "not_signed": broken,
    }


@app.command("baseline")
def baseline(
    sagas: Annotated[
        list[str] | None,
        typer.Argument(help="Only these sagas (default: every saga).", show_default=False),
    ] = None,
    database_url: DatabaseUrl = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the result as JSON.")] = False,
) -> None:
    """Sign the current head of every saga that has no checkpoint yet (once, at cut-over).

    Uses SAGACITY_SIGNING_KEY and SAGACITY_CHECKPOINT_DIR, as workers do. Exit 1 when some saga
    was not signed: its chain does not verify, or (named) it has no rows; each is listed.
    """
    settings = settings_or_exit()
    url = journal_url_or_exit(database_url)
    try:
        writer = CheckpointWriter.open(settings.checkpoint_dir, settings.signing_key)
        if writer is None:
            raise typer.BadParameter(
                "set SAGACITY_SIGNING_KEY and SAGACITY_CHECKPOINT_DIR (the workers' anchors)"
            )
        result = asyncio.run(_baseline(url, writer, sagas or None))
    except typer.BadParameter as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(result, ensure_ascii=False))
    else:
        typer.echo(
            f"baseline signed for {len(result['signed'])} sagas with key {result['key_id']} "
            f"into {result['checkpoint_dir']}; {len(result['already_anchored'])} already had "
            "checkpoints"
        )
        for saga_id, why in result["not_signed"].items():
            typer.echo(f"NOT SIGNED {saga_id}: {why}")
    raise typer.Exit(1 if result["not_signed"] else 0)


@app.command("rotate")
def rotate(
    new_key: Annotated[
        Path,
        typer.Argument(
            help="The key that signs from now on: its public half (PEM) or the private key.",
            show_default=False,
        ),
    ],
) -> None:
    """Sign, with SAGACITY_SIGNING_KEY, that NEW_KEY signs checkpoints and tree heads from now on.

    The statement goes to SAGACITY_CHECKPOINT_DIR's keys/rotations.jsonl; then point the workers'
    SAGACITY_SIGNING_KEY at the new key. Verifiers pinning the old key trust the new one.
    """
    settings = settings_or_exit()
    if settings.signing_key is None or settings.checkpoint_dir is None:
        typer.echo(
            "error: set SAGACITY_SIGNING_KEY (the key in use) and SAGACITY_CHECKPOINT_DIR",
            err=True,
        )
        raise typer.Exit(2)
    try:
        old = load_private_key(settings.signing_key)
        new = load_public_key(new_key)
        if key_id(new) == key_id(old.public_key()):
            raise SagacityError(f"{new_key} is the key in use already")
        statement = record_rotation(settings.checkpoint_dir, old, new)
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(
        f"key {statement.from_id} signed that key {key_id(new)} signs from {statement.at} on "
        f"({settings.checkpoint_dir / ROTATIONS}); now point SAGACITY_SIGNING_KEY at the new key"
    )
