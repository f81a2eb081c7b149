"""``saga journal``: a saga's journal rows from Postgres, whether they verify, as a table or JSON.

Without checkpoints only the hash chain is checked, and the verdict says what that cannot show;
with them (``SAGACITY_CHECKPOINT_DIR``) the chain is also compared with its anchors.
"""

from __future__ import annotations

import json
from contextlib import aclosing
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sagacity.cli._common import configured_checkpoints
from sagacity.cli.db import journal_url_or_exit
from sagacity.cli.saga.shared import AsJson, SagaId, Usage, read_settings, run
from sagacity.errors import SagacityError
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.report import SagaReport, Source, saga_report
from sagacity.journal import Entry, format_timestamp, verify_rows
from sagacity.settings import Settings
from sagacity.store import JournalStore


def _row_json(entry: Entry) -> dict[str, Any]:
    return {
        "saga_id": entry.saga_id,
        "seq": entry.seq,
        # the exact text the row's hash covers (docs/hash-rules.md), not a display form
        "timestamp": format_timestamp(entry.timestamp),
        "tool_name": entry.tool_name,
        "phase": str(entry.phase),
        "input": entry.input,
        "payload": entry.payload,
        "hash": entry.hash,
    }


def _verdict_json(report: SagaReport, anchored: bool) -> dict[str, Any]:
    verdict = report.verdict
    problem = verdict.problem
    return {
        "ok": report.ok,
        "rows": verdict.rows,
        "head_seq": verdict.head_seq,
        "head_hash": verdict.head_hash,
        "problem": None
        if problem is None
        else {"seq": problem.seq, "fault": problem.fault.value, "detail": problem.detail},
        # INTENT rows no EXECUTED or FAILED follows: SUSPECT, or still running
        "dangling_intents": [{"seq": d.seq, "tool_name": d.tool_name} for d in verdict.dangling],
        "anchored": anchored,
        "anchors": [c.to_dict() for c in report.checks],
    }


#: marks an INTENT row no outcome row follows
NO_OUTCOME = "[NO OUTCOME]"
#: what a chain that verifies still cannot show when no anchor was compared with it
CHAIN_ONLY = "hash chain only: a cut tail or a recomputed chain is not detectable without anchors"


def _clip(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _anchors(settings: Settings) -> CheckpointDir | None:
    """The configured checkpoints, or None when there are none to compare with."""
    try:
        return configured_checkpoints(settings)
    except SagacityError as exc:
        raise Usage(str(exc)) from None


def journal(
    saga: SagaId,
    full: Annotated[
        bool, typer.Option("--full", help="Whole hashes, inputs and payloads.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The saga's journal rows from Postgres, with their hashes, and whether they verify.

    With checkpoints configured (SAGACITY_CHECKPOINT_DIR) the chain is also compared with them;
    without, only the hash chain is checked, and the verdict says what that cannot show.
    """

    async def work() -> int:
        settings = read_settings()
        url = journal_url_or_exit(None)  # as `verify` finds it: the dev stack's, when unset
        checkpoints = _anchors(settings)
        # two connections: verify_journal streams rows while it looks up those anchors name
        async with await JournalStore.open(url, max_size=2) as store:
            rows = await store.read(saga)
            if checkpoints is None:
                report = saga_report(verify_rows(saga, rows), [])
            else:
                reports = verify_journal(store, saga_ids=[saga], checkpoints=checkpoints)
                async with aclosing(reports) as stream:
                    (report,) = [r async for r in stream]
        if not rows and checkpoints is None:
            raise Usage(f"saga {saga!r} has no journal rows")
        anchored = checkpoints is not None
        if as_json:
            document = {
                "saga_id": saga,
                "rows": [_row_json(r) for r in rows],
                "verdict": _verdict_json(report, anchored),
            }
            typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            _print_journal(saga, rows, report, anchored=anchored, full=full)
        return 0 if report.ok else 1

    run(work())


def _print_journal(
    saga: str, rows: list[Entry], report: SagaReport, *, anchored: bool, full: bool
) -> None:
    verdict = report.verdict
    if rows:
        table = Table(title=f"journal of {saga}", title_justify="left")
        for column in ("seq", "time (UTC)", "tool", "phase", "input", "payload", "hash"):
            table.add_column(column, overflow="fold", no_wrap=column in {"seq", "time (UTC)"})
        clip = (lambda s: s) if full else _clip
        dangling = {d.seq for d in verdict.dangling}
        for r in rows:
            # str(): a tampered row may hold a phase that is not one of the eight
            phase = Text(str(r.phase))
            if r.seq in dangling:
                phase.append(f" {NO_OUTCOME}", style="bold yellow")
            table.add_row(
                str(r.seq),
                r.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f"),
                r.tool_name,
                phase,
                clip(r.input),
                clip(r.payload),
                r.hash if full else r.hash[:12],
            )
        # piped output would be 80 columns wide: room for a readable row instead
        console = Console(width=max(Console().width, 140))
        console.print(table)
    else:
        typer.echo(f"saga {saga} has no journal rows")
    for d in verdict.dangling:
        typer.echo(
            f"{NO_OUTCOME} seq {d.seq}: {d.tool_name} has no EXECUTED or FAILED after its INTENT: "
            "its outcome is unknown (SUSPECT until someone runs `sagacity saga resolve`, or "
            "still running)"
        )
    problem = verdict.problem
    head = f"{verdict.rows} rows, head seq {verdict.head_seq} hash {verdict.head_hash}"
    if problem is not None:
        typer.echo(
            f"chain BROKEN at seq {problem.seq}: {problem.fault.value}: {problem.detail} "
            f"(verified up to seq {verdict.head_seq})"
        )
    elif not anchored:
        typer.echo(f"chain verified ({CHAIN_ONLY}): {head}")
    elif report.ok:
        agreed = "; ".join(f"{c.source} {c.agreement} {c.detail}" for c in report.checks)
        typer.echo(f"chain and anchors verified: {head}; {agreed}")
    else:
        typer.echo(f"chain verified but an anchor disagrees: {head}")
    for check in report.faults():
        if check.source is not Source.CHAIN:
            at = f" seq {check.seq}" if check.seq is not None else ""
            typer.echo(f"ANCHOR {check.source}{at} {check.agreement}: {check.detail}")
