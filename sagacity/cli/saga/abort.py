"""``saga abort``: stop a saga so it compensates what ran, or with ``--dry-run`` say what it would undo.

The abort is a signal, signed with ``SAGACITY_APPROVER_KEY`` when it is set. ``--dry-run`` reads
the journal and the catalog the saga decides with, prints the plan (JSON or a table) and sends
and writes nothing.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text

from sagacity.cli._exit import hard_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.cli.saga.found import ended_state, over, report
from sagacity.cli.saga.shared import (
    ID_MAX,
    AsJson,
    SagaId,
    Usage,
    Wait,
    connected,
    keys,
    operator,
    read_settings,
    run,
)
from sagacity.cli.saga.status import settle, status_of
from sagacity.inputs import check_name, invalid
from sagacity.journal import Planned, RollbackPlan, rollback_plan
from sagacity.store import JournalStore
from sagacity.temporal.catalog import recorded_catalog
from sagacity.temporal.models import Abort, SagaState, SagaStatus
from sagacity.tools import Reversibility


@hard_exit
def abort(
    saga: SagaId,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Why; journaled with the abort.", show_default=False),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who aborts (default: whom SAGACITY_APPROVER_KEY signs for in the keyring, "
            "else your user name); journaled, and signed with that key when it is set.",
            show_default=False,
        ),
    ] = None,
    wait: Wait = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Only say what would be compensated, in order, and what would stay live: "
            "nothing is sent or written.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Abort a running saga: it stops and compensates what ran, in reverse.

    With --dry-run, exit 0 after printing the plan; 1 when the saga already ended.
    """
    url = journal_url_or_exit(None) if dry_run else None

    async def work() -> int:
        check_name(saga, what="saga id", max_len=ID_MAX)
        if url is not None:
            return await _dry_run(saga, url, as_json=as_json)
        if reason is None:
            raise Usage("--reason is required: say why the saga is aborted (it is journaled)")
        settings = read_settings()
        signer, keyring = keys(settings)
        async with connected(settings) as client:
            handle = client.get_workflow_handle(saga)
            current = await status_of(client, handle)
            if over(saga, current):
                return 1
            try:
                payload = Abort(reason=reason, by=by or operator(signer, keyring))
            except ValidationError as exc:
                raise invalid(exc, what="abort") from None
            if signer is not None:
                signed = signer.sign(payload.statement(saga))
                payload = payload.model_copy(update={"signature": signed})
            await handle.signal("abort", payload)
            signed_as = "signed" if signer is not None else "unsigned"
            typer.echo(
                f"abort sent to {saga} by {payload.by} ({signed_as}): it compensates what ran",
                err=True,
            )
            return report(await settle(client, handle), as_json=False) if wait else 0

    run(work())


async def _dry_run(saga: str, url: str, *, as_json: bool) -> int:
    """Print what an abort of ``saga`` would do, from its journal; send and write nothing."""
    async with connected(read_settings()) as client:
        handle = client.get_workflow_handle(saga)
        current = await status_of(client, handle)
        # the catalog the saga decides with: whether each tool has a compensation
        catalog = await recorded_catalog(client, handle)
    async with await JournalStore.open(url, min_size=1, max_size=1) as store:
        rows = await store.read(saga)
    plan = rollback_plan(rows, {name: s.has_compensation for name, s in catalog.items()})
    over = ended_state(current)
    ended = over is not None
    if isinstance(current, SagaStatus):
        state = current.state
    elif over is None:
        raise Usage(f"workflow {saga} is no saga: it has nothing an abort would compensate")
    else:
        state = over
    kinds = {name: s.reversibility for name, s in catalog.items()}
    document = _plan_json(saga, state, ended, plan, kinds)
    if as_json:
        typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        _print_plan(document)
    return 1 if ended else 0


def _plan_json(
    saga: str,
    state: SagaState,
    ended: bool,
    plan: RollbackPlan,
    kinds: dict[str, Reversibility],
) -> dict[str, Any]:
    def call(step: Planned) -> dict[str, Any]:
        tool = step.call.intent.tool_name
        kind = kinds.get(tool)
        return {
            "seq": step.call.intent.seq,
            "tool_name": tool,
            "reversibility": kind.value if kind else None,
            "check": step.check,
        }

    def why(step: Planned) -> str:
        kind = kinds.get(step.call.intent.tool_name)
        if ended:
            return f"the saga ended {state.value}"
        if kind is None:
            return "the saga's worker knows no such tool"
        if kind is Reversibility.IRREVERSIBLE:
            return "nothing undoes it"
        return step.check or ""  # a compensation that failed

    waiting = plan.awaiting_approval
    return {
        "saga_id": saga,
        "state": state.value,
        "ended": ended,
        "dry_run": True,
        # an ended saga takes no abort: nothing more is compensated
        "compensate": [] if ended else [call(s) for s in plan.compensate],
        "stays_live": [{**call(s), "why": why(s)} for s in (plan.steps if ended else plan.live)],
        "already_compensated": [
            {"seq": c.intent.seq, "tool_name": c.intent.tool_name} for c in plan.compensated
        ],
        "awaiting_approval": None
        if waiting is None or ended
        else {"seq": waiting.seq, "tool_name": waiting.tool_name},
    }


def _print_plan(plan: dict[str, Any]) -> None:
    saga, state = plan["saga_id"], plan["state"]
    if plan["ended"]:
        typer.echo(f"saga {saga} already ended: {state}; an abort would compensate nothing")
    else:
        typer.echo(f"saga {saga}: {state}; an abort would compensate, newest first:")
    table = Table(title_justify="left")
    for column in ("#", "seq", "tool", "reversibility", "on abort", "check"):
        table.add_column(column, overflow="fold", no_wrap=column in {"#", "seq"})
    for i, step in enumerate(plan["compensate"], 1):
        table.add_row(
            str(i),
            str(step["seq"]),
            step["tool_name"],
            step["reversibility"] or "?",
            "compensated",
            Text(step["check"] or "", style="bold yellow"),
        )
    for step in plan["stays_live"]:
        table.add_row(
            "",
            str(step["seq"]),
            step["tool_name"],
            step["reversibility"] or "?",
            Text(f"stays live: {step['why']}", style="yellow"),
            Text(step["check"] or "", style="bold yellow"),
        )
    if table.rows:
        Console(width=max(Console().width, 120)).print(table)
    else:
        typer.echo("  no call has taken effect")
    done = plan["already_compensated"]
    if done:
        typer.echo(
            "already compensated: " + ", ".join(f"{c['tool_name']} (seq {c['seq']})" for c in done)
        )
    waiting = plan["awaiting_approval"]
    if waiting is not None:
        typer.echo(
            f"{waiting['tool_name']} waits for approval at seq {waiting['seq']}: "
            "aborted, it never runs"
        )
    flagged = [s for s in [*plan["compensate"], *plan["stays_live"]] if s["check"]]
    for step in flagged:
        typer.echo(f"CHECK {step['tool_name']} (seq {step['seq']}): {step['check']}")
    typer.echo("dry run: nothing was sent to the saga and nothing was written")
