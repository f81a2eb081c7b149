"""``sagacity witness``: run a C2SP tlog-witness over the logs it is told to trust.

Exit status: 0 after a clean stop (or ``--show-key``), 2 for bad options or an unusable folder.
"""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path
from typing import Annotated

import typer

from sagacity.cli._common import fail
from sagacity.errors import SagacityError
from sagacity.evidence.note import NoteKey
from sagacity.evidence.trust import raw_public
from sagacity.evidence.witness import DEFAULT_NAME, Witness, witness_key

__all__ = ["witness"]


def _listen(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not (sep and host and port.isdigit() and 0 < int(port) < 65536):
        raise fail(f"--listen {text!r}: give HOST:PORT, such as 127.0.0.1:7380")
    return host.strip("[]"), int(port)


def witness(
    folder: Annotated[
        Path,
        typer.Option(
            "--folder",
            help="The witness's own folder: its key (witness.pem, made on first start) and the "
            "latest head it cosigned per log. Keep it where no log operator can write.",
        ),
    ],
    listen: Annotated[
        str, typer.Option("--listen", help="HOST:PORT to serve on.")
    ] = "127.0.0.1:7380",
    log: Annotated[
        list[str] | None,
        typer.Option(
            "--log",
            help="A log to witness, as its verifier key NAME+ID+KEY (what `sagacity log head` "
            "prints); repeat for more.",
            show_default=False,
        ),
    ] = None,
    name: Annotated[
        str, typer.Option("--name", help="The witness's key name; keep it once published.")
    ] = DEFAULT_NAME,
    show_key: Annotated[
        bool,
        typer.Option(
            "--show-key", help="Print the witness's verifier key and trust file entry, then exit."
        ),
    ] = False,
) -> None:
    """Cosign the tree heads of the given logs, each only if consistent with the last one seen
    (POST /add-checkpoint); GET /checkpoint?origin=ORIGIN answers the latest head cosigned.
    Runs until Ctrl-C or SIGTERM."""
    host, port = _listen(listen)
    try:
        key = witness_key(folder)
        logs = [NoteKey.parse(vkey) for vkey in log or []]
        public = NoteKey(name, key.public_key(), 0x04)
        server = Witness(folder, name, key, logs)
    except (SagacityError, ValueError, OSError) as exc:
        raise fail(str(exc)) from None
    if any(log.type != 0x01 for log in logs):
        raise fail("--log takes a log's verifier key (type 0x01), not a witness's")
    entry = {
        "name": name,
        "public_key": base64.b64encode(raw_public(key.public_key())).decode("ascii"),
        "url": f"http://{listen}",
    }
    typer.echo(f"witness key: {public.vkey()}")
    typer.echo(f"trust file entry: {json.dumps(entry)}")
    if show_key:
        return
    if not logs:
        raise fail("give at least one --log VERIFIER_KEY to witness")
    typer.echo(f"witnessing {', '.join(sorted(server.logs))} (state in {folder})")

    import uvicorn

    from sagacity.cli._serving import Server
    from sagacity.evidence.witness_http import create_app

    # uvicorn's start line ("Uvicorn running on …") says when it listens; requests are not logged
    config = uvicorn.Config(create_app(server), host=host, port=port, access_log=False)
    asyncio.run(Server(config).serve())
