"""``sagacity keyring``: make the keys decisions are signed with, and the keyring that trusts them.

``init FOLDER --approver alice --approver bob`` writes ``FOLDER/keyring.json`` (the file
``SAGACITY_KEYRING`` names), one private key per approver (``FOLDER/<name>-key.pem``, for their
``SAGACITY_APPROVER_KEY``) and the approvals HTTP API's key (``FOLDER/service-key.pem``, its
``SAGACITY_SERVICE_KEY``, trusted to sign for whoever it authenticated). Workers need only the
keyring; hand each approver their own key, and nobody else.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from sagacity.cli._common import fail
from sagacity.errors import SagacityError
from sagacity.evidence.decisions import ANY_PRINCIPAL, Keyring, keyring_entry, write_keyring
from sagacity.evidence.keys import generate_key
from sagacity.inputs import check_name

__all__ = ["app"]

app = typer.Typer(
    name="keyring",
    help="The keys decisions are signed with, and the keyring workers check them against.",
    no_args_is_help=True,
)

SERVICE_KEY = "service-key.pem"
KEYRING = "keyring.json"


@app.command("init")
def init_command(
    folder: Annotated[Path, typer.Argument(help="A new or empty folder for the keys.")],
    approvers: Annotated[
        list[str] | None,
        typer.Option("--approver", help="Someone who signs with a key of their own (repeat)."),
    ] = None,
) -> None:
    """Create the approvals service's key, a key per approver, and the keyring trusting them."""
    try:
        names = [check_name(name, what="--approver") for name in approvers or []]
        if len(set(names)) != len(names) or any(n == ANY_PRINCIPAL or "/" in n for n in names):
            raise fail("each --approver once, with no `/`, and not `*`")
        if folder.exists() and any(folder.iterdir()):
            raise fail(f"{folder} is not empty: refusing to replace keys", 1)
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        service = generate_key(folder / SERVICE_KEY).public_key()
        entries = [keyring_entry("approvals-service", service, [ANY_PRINCIPAL])]
        for name in names:
            key = generate_key(folder / f"{name}-key.pem").public_key()
            entries.append(keyring_entry(name, key, [name]))
        write_keyring(folder / KEYRING, Keyring(keys=entries))
    except SagacityError as exc:
        raise fail(str(exc), 1) from None
    typer.echo(f"keyring: {folder / KEYRING} (SAGACITY_KEYRING on workers and verifiers)")
    typer.echo(f"service key: {folder / SERVICE_KEY} (SAGACITY_SERVICE_KEY of the approvals API)")
    for name in names:
        typer.echo(f"{name}'s key: {folder / f'{name}-key.pem'} (their SAGACITY_APPROVER_KEY)")
