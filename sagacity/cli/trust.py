"""``sagacity trust``: write and read trust files, the keys verifiers pin out of band.

``sagacity trust init FILE --signer NAME=PUBLIC_KEY`` pins the checkpoint signing key (and, with
``--witness``, the witnesses whose cosignatures count); ``sagacity trust show FILE`` prints what a
trust file pins, with each key's full fingerprint to compare with the published one. Keep the
file where no worker and no database owner can write (``sagacity doctor`` flags one they can).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sagacity.cli._common import fail
from sagacity.errors import SagacityError
from sagacity.evidence.keys import load_public_key
from sagacity.evidence.trust import (
    TrustedKey,
    TrustedWitness,
    TrustRoots,
    fingerprint,
    load_trust,
    witness_from_vkey,
    write_trust,
)

__all__ = ["app"]

app = typer.Typer(
    name="trust",
    help="Trust files: the signing keys and witnesses verifiers pin, apart from the data.",
    no_args_is_help=True,
)


def _signer(text: str) -> TrustedKey:
    name, sep, file = text.partition("=")
    if not (sep and name and file):
        raise fail(f"--signer {text!r}: give NAME=PUBLIC_KEY_FILE")
    return TrustedKey(name, load_public_key(Path(file)))


def _witness(text: str) -> TrustedWitness:
    vkey, _, url = text.partition(" ")
    return witness_from_vkey(vkey, url.strip() or None)


@app.command("init")
def init(
    file: Annotated[Path, typer.Argument(help="The trust file to write.", show_default=False)],
    signer: Annotated[
        list[str],
        typer.Option(
            "--signer",
            help="NAME=PUBLIC_KEY_FILE of a key that may sign checkpoints and tree heads.",
            show_default=False,
        ),
    ],
    witness: Annotated[
        list[str] | None,
        typer.Option(
            "--witness",
            help="'VKEY URL' of a witness: its signed-note verifier key (as `sagacity witness` "
            "prints it) and, optionally, where it answers.",
            show_default=False,
        ),
    ] = None,
    quorum: Annotated[
        int | None,
        typer.Option(
            "--quorum", help="How many witnesses must cosign a tree head (default: all of them)."
        ),
    ] = None,
    force: Annotated[bool, typer.Option("--force", help="Replace an existing trust file.")] = False,
) -> None:
    """Write a trust file pinning these keys (read-only, mode 0444)."""
    if file.exists() and not force:
        raise fail(f"{file} exists; pass --force to replace what it pins")
    try:
        witnesses = tuple(_witness(w) for w in witness or [])
        roots = TrustRoots(
            tuple(_signer(s) for s in signer),
            witnesses,
            len(witnesses) if quorum is None else quorum,
        )
        if not 0 <= roots.witness_quorum <= len(witnesses):
            raise fail(f"--quorum must be from 0 to {len(witnesses)}")
        write_trust(file, roots)
        load_trust(file)  # what was written reads back
    except SagacityError as exc:
        raise fail(str(exc)) from None
    show(file)


@app.command("show")
def show(
    file: Annotated[Path, typer.Argument(help="The trust file to read.", show_default=False)],
) -> None:
    """Print what a trust file pins, with each key's full fingerprint."""
    try:
        roots = load_trust(file)
    except SagacityError as exc:
        raise fail(str(exc)) from None
    typer.echo(f"{file}:")
    for s in roots.signers:
        typer.echo(f"  signer   {s.name}  fingerprint {fingerprint(s.key)}")
    for w in roots.witnesses:
        where = f"  at {w.url}" if w.url else ""
        typer.echo(f"  witness  {w.name}  fingerprint {fingerprint(w.key)}{where}")
    if roots.witnesses:
        typer.echo(f"  quorum   {roots.witness_quorum} of {len(roots.witnesses)}")
