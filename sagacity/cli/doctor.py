"""``sagacity doctor``: check the production posture against the settings that weaken guarantees.

Exit 0 when nothing weakens them, 1 when any finding (each printed with its id, severity, what
and fix), 2 for bad input or settings (an unknown flag, a malformed setting, a key file that
cannot be read, no database to check), 3 when the database could not be checked (unreachable,
not migrated). ``--json`` prints one object.
"""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Column, Table

from sagacity.cli._common import fail, settings_or_exit
from sagacity.cli._exit import hard_exit
from sagacity.cli.db import DatabaseUrl, journal_url_or_exit
from sagacity.doctor import diagnose
from sagacity.errors import SagacityError, StoreUnavailable

__all__ = ["doctor"]

#: the database could not be checked: neither clean (0) nor findings (1) nor bad input (2)
CANNOT_CHECK = 3


@hard_exit
def doctor(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the role checked and the findings as JSON.")
    ] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Exit 1 naming each setting or grant that silently weakens the guarantees, and its fix:
    a worker login that can rewrite the journal, anchors, keyring, redaction or payload codec
    off, pools that cannot notice dead connections, no retention."""
    settings = settings_or_exit()
    url = journal_url_or_exit(database_url)
    try:
        diagnosis = asyncio.run(diagnose(settings, url))
    except StoreUnavailable as exc:
        raise fail(
            f"cannot check the worker's database login and retention: {exc}", CANNOT_CHECK
        ) from None
    except SagacityError as exc:
        raise fail(f"cannot check the settings: {exc}") from None
    if as_json:
        typer.echo(json.dumps(diagnosis.to_dict(), ensure_ascii=False))
    elif diagnosis.findings:
        # fold, never cut: a setting's name in a fix must stay whole to be of use
        table = Table(
            Column("id", no_wrap=True),
            "severity",
            Column("what", overflow="fold"),
            Column("fix", overflow="fold"),
        )
        for f in diagnosis.findings:
            table.add_row(f.id.value, f.severity.value, f.what, f.fix)
        Console().print(table)
    typer.echo(
        f"{len(diagnosis.findings)} findings for workers logging in as {diagnosis.role}",
        err=as_json,
    )
    raise typer.Exit(0 if diagnosis.clean else 1)
