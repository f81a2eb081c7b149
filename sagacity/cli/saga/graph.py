"""``saga graph``: draw one saga's path from its journal as Mermaid, Graphviz DOT or SVG.

The rows come from Postgres, as ``saga journal`` reads them, or with ``--journal FILE`` from
rows already exported: what ``saga journal --json`` printed, or an evidence bundle's
``journal.jsonl``, so a saga can be drawn with no database at all.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer

from sagacity.cli.db import journal_url_or_exit
from sagacity.cli.saga.shared import SagaId, run
from sagacity.errors import InvalidInput, SagaNotFound
from sagacity.evidence.bundle import entry_from_line
from sagacity.evidence.graph import FORMATS, dot, mermaid, saga_path
from sagacity.evidence.graph_svg import svg
from sagacity.journal import Entry, Phase
from sagacity.store import JournalStore

_DRAW = {"mermaid": mermaid, "dot": dot}


def graph(
    saga: SagaId,
    form: Annotated[
        str, typer.Option("--format", help=f"One of: {', '.join(FORMATS)}.")
    ] = "mermaid",
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write here instead of stdout.", dir_okay=False),
    ] = None,
    journal: Annotated[
        Path | None,
        typer.Option(
            "--journal",
            help="Read the rows from this file (saga journal --json's output, or a bundle's "
            "journal.jsonl) instead of Postgres.",
            dir_okay=False,
        ),
    ] = None,
) -> None:
    """Draw the saga's path from its journal: each call with its phase and times, approvals with
    approver and wait, the failure, compensations newest first, SUSPECT calls and live effects."""

    async def work() -> int:
        if form not in FORMATS:
            raise InvalidInput(f"--format {form!r} is not one of: {', '.join(FORMATS)}")
        rows = _from_file(journal, saga) if journal is not None else await _from_journal(saga)
        if not rows:
            where = f"in {journal}" if journal is not None else "in the journal"
            raise SagaNotFound(f"saga {saga!r} has no rows {where}")
        path = saga_path(saga, rows)
        drawn = svg(path) if form == "svg" else _DRAW[form](path)
        if output is None:
            typer.echo(drawn, nl=False)
        else:
            try:
                output.write_text(drawn, encoding="utf-8")
            except OSError as exc:
                raise InvalidInput(f"cannot write {output}: {exc.strerror}") from None
        return 0

    run(work())


async def _from_journal(saga: str) -> list[Entry]:
    url = journal_url_or_exit(None)  # as `saga journal` finds it: the dev stack's, when unset
    async with await JournalStore.open(url, max_size=1) as store:
        return await store.read(saga)


def _from_file(journal: Path, saga: str) -> list[Entry]:
    """The saga's rows in the file, in seq order: a ``saga journal --json`` document, else JSON
    lines. A row that is not one, or a phase that is not one of the eight, is
    :class:`InvalidInput` naming where."""
    try:
        text = journal.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read {journal}: {exc}") from None
    try:
        document = json.loads(text)
    except ValueError:
        document = None  # more than one JSON value: JSON lines
    if isinstance(document, dict) and isinstance(document.get("rows"), list):
        lines = [(f"row {i}", json.dumps(row)) for i, row in enumerate(document["rows"], 1)]
    else:
        lines = [(f"line {i}", line) for i, line in enumerate(text.splitlines(), 1)]
    rows = []
    for where, line in lines:
        if not line.strip():
            continue
        try:
            row = entry_from_line(line)
            if row.saga_id == saga:
                rows.append(replace(row, phase=Phase(row.phase)))
        except ValueError as exc:
            raise InvalidInput(f"{journal} {where}: {exc}") from None
    return sorted(rows, key=lambda r: r.seq)
