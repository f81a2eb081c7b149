"""``sagacity certify``: a CI gate that fails while any saga in scope needs a person.

Exit 0 when every saga is certified, 1 when any has a finding (each printed with its saga and
seq), 2 for bad input or settings. ``--json`` prints one object per saga; ``--junit FILE`` also
writes JUnit XML for CI systems.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from pydantic import TypeAdapter, ValidationError
from rich.console import Console
from rich.table import Table

from sagacity.cli._common import (
    checkpoints_or_exit,
    duration_or_exit,
    fail,
    run_or_exit,
    temporal_client,
)
from sagacity.cli._exit import hard_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.errors import SagacityError
from sagacity.evidence.certify import Certificate, certify, junit_xml, task_finding
from sagacity.evidence.decisions import load_keyring
from sagacity.inputs import check_name
from sagacity.settings import Settings, load_settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.runs import RunChains
from sagacity.temporal.task_health import failing_tasks

__all__ = ["certify_command"]


def _since(text: str | None) -> datetime | None:
    """``--since``: an ISO 8601 time (UTC unless it says), or a duration back from now."""
    if text is None:
        return None
    try:
        when = TypeAdapter(datetime).validate_python(text)
    except ValidationError:
        return datetime.now(UTC) - duration_or_exit("--since", text)
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


async def _name_failing_tasks(settings: Settings, certificates: list[Certificate]) -> None:
    """Add a finding for each saga whose workflow task keeps failing, as Temporal tells it (not
    asked when no TEMPORAL_ADDRESS is set: the journal's findings alone)."""
    if not settings.temporal_address:
        return
    client = await temporal_client(settings)
    failing = await failing_tasks(client, [c.saga_id for c in certificates])
    for cert in certificates:
        if cert.saga_id in failing:
            cert.findings.append(task_finding(cert.saga_id, failing[cert.saga_id].describe()))


@hard_exit
def certify_command(
    saga: Annotated[
        list[str] | None,
        typer.Option("--saga", help="Only this saga (repeatable). Default: every saga in scope."),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only sagas with a row since then: an ISO 8601 time, or a duration back from "
            "now (PT1H, P7D, seconds). Default: every saga.",
        ),
    ] = None,
    approval_sla: Annotated[
        str,
        typer.Option("--approval-sla", help="How long a call may wait for a decision (PT24H)."),
    ] = "PT24H",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per saga.")] = False,
    junit: Annotated[
        Path | None, typer.Option("--junit", help="Also write JUnit XML to this file.")
    ] = None,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Journal database (default: SAGACITY_DATABASE_URL)."),
    ] = None,
) -> None:
    """Fail (exit 1) while a saga has an effect live after a rollback or after its workflow
    closed unfinished (terminated, timed out), a failed compensation, a call of unknown outcome,
    an approval past its SLA, evidence that does not verify, or (with TEMPORAL_ADDRESS set) a
    workflow task that keeps failing."""
    try:
        settings = load_settings()
        keyring = None if settings.keyring is None else load_keyring(settings.keyring)
    except SagacityError as exc:
        raise fail(str(exc)) from None
    for saga_id in saga or ():
        try:
            check_name(saga_id, what="a saga id")
        except SagacityError as exc:
            raise fail(str(exc)) from None
    if saga and since:
        raise fail("give --saga or --since, not both")
    sla = duration_or_exit("--approval-sla", approval_sla)
    if sla <= timedelta(0):
        raise fail("--approval-sla must be longer than zero")
    start = _since(since)
    url = journal_url_or_exit(database_url)
    checkpoints = checkpoints_or_exit(settings)

    async def work() -> list[Certificate]:
        async with await JournalStore.open(url, min_size=1, max_size=2) as journal:
            found = certify(
                journal,
                ApprovalStore(journal.pool),
                saga_ids=saga or None,
                since=start,
                approval_sla=sla,
                checkpoints=checkpoints,
                keyring=keyring,
                runs=RunChains(lambda: temporal_client(settings)),
            )
            certificates = [c async for c in found]
        await _name_failing_tasks(settings, certificates)
        return certificates

    certificates = run_or_exit(work())
    if junit is not None:
        try:
            junit.write_text(junit_xml(certificates), encoding="utf-8")
        except OSError as exc:
            raise fail(f"cannot write {junit}: {exc}") from None
    failing = [c for c in certificates if not c.ok]
    if as_json:
        for cert in certificates:
            line = {
                "saga_id": cert.saga_id,
                "certified": cert.ok,
                "rows": cert.rows,
                "findings": [f.to_dict() for f in cert.findings],
                "corrected": [c.to_dict() for c in cert.corrected],
            }
            typer.echo(json.dumps(line, ensure_ascii=False))
    elif failing:
        table = Table("saga", "seq", "finding", "detail")
        for cert in failing:
            for f in cert.findings:
                table.add_row(
                    cert.saga_id, "" if f.seq is None else str(f.seq), f.kind.value, f.detail
                )
        Console().print(table)
    if not as_json:
        for corrected in (c for cert in certificates for c in cert.corrected):
            typer.echo(f"saga {corrected.saga_id}: {corrected.detail}")
    anchors = "chain, checkpoints" if checkpoints is not None else "chain only (no checkpoints)"
    typer.echo(
        f"{len(certificates) - len(failing)} of {len(certificates)} sagas certified; "
        f"{len(failing)} need a person (evidence checked: {anchors}"
        f"{', decision signatures' if keyring is not None else ''})",
        err=as_json,
    )
    raise typer.Exit(1 if failing else 0)
