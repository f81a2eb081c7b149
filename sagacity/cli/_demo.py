"""``sagacity demo``: an agent places an order, the confirmation email fails, the saga undoes the rest.

With nothing configured it starts the embedded Postgres and an in-memory Temporal dev server
(``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` point it at yours instead), sets the journal up
as its owner (``DevStack.prepare``: migrations, the append-only ``sagacity_app`` login, the
anchors under ``<data_dir>/anchors``), and runs a worker in this process, logged in as
``sagacity_app`` and signing a checkpoint of each new head, serving the Order tools and the agent
saga workflow. The agent
is the Agents SDK's real loop; its model is the scripted one unless ``OPENAI_API_KEY`` is set.
The irreversible ``send_confirmation`` waits for approval; the demo approves it as
``demo-approver``. Then it shows what the agent did, what was undone, the journal with its hashes,
the chain's verification against the signed checkpoints, and the shop's stock and orders before
and after.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import sys
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import typer
from agents import set_tracing_disabled
from pydantic import BaseModel
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from temporalio.client import WorkflowHandle, WorkflowQueryFailedError
from temporalio.service import RPCError
from temporalio.worker import Worker

from sagacity.agents import (
    AGENT_WORKFLOW,
    AgentSagaRequest,
    AgentSagaResult,
    agent_plugins,
    model_provider_from_settings,
    uses_scripted_model,
    with_plugins,
)
from sagacity.cli._demo_journal import JournalRow, Verification, read_verified
from sagacity.cli._demo_recovery import PRODUCT, Recovery, run_recovery, worker_env
from sagacity.devstack import DevStack
from sagacity.errors import DevStackError, SagacityError
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.keys import load_private_key
from sagacity.settings import Settings, load_settings
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.models import Approve, SagaState, SagaStatus
from sagacity.worker import connect_client
from workflows.agent_order.app import SCRIPTS, TOOLS, lifespan
from workflows.agent_order.script import PROMPT

__all__ = ["DemoReport", "main", "run_demo"]

APPROVER = "demo-approver"
FAULT = ("send_confirmation", "mail relay refused the message")
#: Sagacity's tables, then the Order example's
TABLES = [
    "side_effect_journal",
    "sagacity_approval_request",
    "inventory",
    "reservations",
    "orders",
    "outbox",
]


class ApprovalGiven(BaseModel):
    journal_seq: int
    tool: str
    input: str
    approver: str


class DemoReport(BaseModel):
    """Everything the demo shows, as data (``--json`` prints it)."""

    saga_id: str
    prompt: str
    model: str
    fault: str | None
    approvals: list[ApprovalGiven]
    result: AgentSagaResult
    journal: list[JournalRow]
    verification: Verification
    before: dict[str, Any]
    after: dict[str, Any]
    database_url: str
    temporal_address: str
    tables: list[str]
    shop_reset: bool
    #: act two: a worker killed mid-call, the saga finished by another (None: not run)
    recovery: Recovery | None = None

    @property
    def restored(self) -> bool:
        """True when stock, reservations, orders and mail are as they were before."""
        return self.before == self.after


def _hide_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _model_label(settings: Settings) -> str:
    if uses_scripted_model(settings):
        return "scripted (no OPENAI_API_KEY set)"
    return f"{settings.model} at {settings.openai_base_url or 'api.openai.com'}"


async def _approve_until_done(
    handle: WorkflowHandle[Any, AgentSagaResult], say: Callable[[str], None]
) -> tuple[AgentSagaResult, list[ApprovalGiven]]:
    """Wait for the saga's result, approving each call that waits for a human on the way."""
    result = asyncio.ensure_future(handle.result())
    given: list[ApprovalGiven] = []
    while not result.done():
        try:
            status = await handle.query("status", result_type=SagaStatus)
        except (WorkflowQueryFailedError, RPCError):
            status = None  # not started yet
        pending = status.pending_approval if status else None
        if pending is not None and pending.journal_seq not in {g.journal_seq for g in given}:
            say(
                f"{pending.tool_name} is irreversible and waits for a human "
                f"(journal seq {pending.journal_seq}); approving as {APPROVER}"
            )
            await handle.signal(
                "approve",
                Approve(
                    journal_seq=pending.journal_seq,
                    approver=APPROVER,
                    input_hash=pending.input_hash,
                ),
            )
            given.append(
                ApprovalGiven(
                    journal_seq=pending.journal_seq,
                    tool=pending.tool_name,
                    input=pending.input_json,
                    approver=APPROVER,
                )
            )
        await asyncio.wait({result}, timeout=0.2)
    return result.result(), given


async def run_demo(
    settings: Settings,
    *,
    fault: bool = True,
    prompt: str = PROMPT,
    crash: bool = True,
    say: Callable[[str], None] = lambda _: None,
) -> DemoReport:
    """Start what is needed, run the agent saga, and gather what happened; with ``crash``, then
    act two (:mod:`sagacity.cli._demo_recovery`)."""
    stack = DevStack(settings, temporal_db="memory")
    async with AsyncExitStack() as exits:
        starting = [
            name
            for name, runs in (
                ("Postgres", stack.runs_postgres),
                ("Temporal dev server", stack.runs_temporal),
            )
            if runs
        ]
        if starting:
            say(f"starting the embedded {' and '.join(starting)}")
        endpoints = await stack.start()
        exits.push_async_callback(stack.stop)
        setup = await stack.prepare()
        if setup.key_created:
            say(f"created the signing key {setup.signing_key}: fingerprint {setup.key_id}")
        settings = settings.model_copy(
            update={**setup.settings(), "temporal_address": endpoints.temporal_address}
        )
        pool = await open_pool(setup.database_url)
        exits.push_async_callback(pool.close)
        journal, approvals = JournalStore(pool), ApprovalStore(pool)
        exits.push_async_callback(journal.close)
        signer = CheckpointWriter(setup.checkpoint_dir, load_private_key(setup.signing_key))
        shop = await exits.enter_async_context(lifespan(setup.database_url))
        if stack.runs_postgres:
            # the embedded database is the demo's own: start from the seed stock every time
            await shop.setup(reset=True)
        await shop.clear_faults()
        if fault:
            await shop.arm_fault(*FAULT)
        before = await shop.snapshot()

        plugins = agent_plugins(
            journal=journal,
            approvals=approvals,
            tools=TOOLS,
            model_provider=model_provider_from_settings(settings, scripts=SCRIPTS),
            checkpoints=signer,
            redactor=settings.model_copy(update={"redact_key": setup.fingerprint_key}).redactor(),
            codec=settings.payload_codec(),
        )
        client = with_plugins(await connect_client(settings), plugins)
        # a queue of its own, so workers of other apps on the default queue never see it
        task_queue = f"sagacity-demo-{uuid.uuid4().hex[:8]}"
        saga_id = f"demo-order-{uuid.uuid4().hex[:8]}"
        worker = Worker(
            client, task_queue=task_queue, graceful_shutdown_timeout=timedelta(seconds=2)
        )
        async with worker:
            say(f"the agent is asked: {prompt!r} (model: {_model_label(settings)})")
            if fault:
                say(f"fault armed: {FAULT[0]} will fail with {FAULT[1]!r}")
            handle = await client.start_workflow(
                AGENT_WORKFLOW,
                AgentSagaRequest(prompt=prompt),
                id=saga_id,
                task_queue=task_queue,
                result_type=AgentSagaResult,
            )
            result, given = await _approve_until_done(handle, say)
        say(f"the saga ended: {result.saga.status.value}")
        after = await shop.snapshot()
        rows, verification = await read_verified(journal, signer, saga_id)
        recovery = (
            await run_recovery(
                client,
                journal,
                shop,
                signer,
                worker_env(setup.settings(), settings),
                settings.data_dir / "logs",
                say,
            )
            if crash
            else None
        )
        report = DemoReport(
            saga_id=saga_id,
            prompt=prompt,
            model=_model_label(settings),
            fault=f"{FAULT[0]}: {FAULT[1]}" if fault else None,
            approvals=given,
            result=result,
            journal=rows,
            verification=verification,
            before=dataclasses.asdict(before),
            after=dataclasses.asdict(after),
            database_url=_hide_password(setup.database_url),
            temporal_address=endpoints.temporal_address,
            tables=TABLES,
            shop_reset=stack.runs_postgres,
            recovery=recovery,
        )
    return report


# -- rendering -------------------------------------------------------------------------------


def _short(value: Any, width: int = 60) -> str:
    """A one-line rendering: ``key=value`` pairs for a dict, JSON for anything else."""
    if isinstance(value, dict):
        text = ", ".join(f"{k}={_short(v, width)}" for k, v in value.items())
    elif isinstance(value, str):
        text = value
    else:
        text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


#: columns short enough to keep on one line; the others wrap
_ONE_LINE = {"#", "seq", "call seq", "tool", "phase", "hash", "before", "after"}


def _decoded(payload: str) -> Any:
    try:
        return json.loads(payload)
    except ValueError:
        return payload


def _table(title: str, *columns: str) -> Table:
    table = Table(title=title, title_justify="left", title_style="bold")
    for column in columns:
        table.add_column(column, no_wrap=column in _ONE_LINE, overflow="fold")
    return table


def _steps_table(report: DemoReport) -> Table:
    table = _table("What the agent did", "#", "tool", "arguments", "outcome", "seq")
    styles = {"executed": "green", "failed": "red", "rejected": "red", "invalid": "yellow"}
    for i, step in enumerate(report.result.steps, 1):
        table.add_row(
            str(i),
            step.tool,
            _short(step.arguments, 40),
            Text(f"{step.status}: {_short(step.output, 120)}", style=styles[step.status]),
            "" if step.seq is None else str(step.seq),
        )
    return table


def _compensation_table(report: DemoReport) -> Table | Text:
    saga = report.result.saga
    if not saga.compensated and not saga.compensation_failed:
        return Text("Nothing was compensated: every step stands.", style="green")
    table = _table("Undone, newest first", "tool", "call seq", "what it had done")
    for effect in saga.compensated:
        table.add_row(effect.tool_name, str(effect.call_seq), _short(effect.result, 70))
    for effect in saga.compensation_failed:
        table.add_row(
            Text(effect.tool_name, style="red"),
            str(effect.call_seq),
            Text("compensation FAILED: still in effect", style="red"),
        )
    return table


def _journal_table(saga_id: str, rows: list[JournalRow]) -> Table:
    table = _table(f"Journal of saga {saga_id}", "seq", "tool", "phase", "payload", "hash")
    for row in rows:
        style = {"FAILED": "red", "COMPENSATED": "yellow", "APPROVED": "cyan"}.get(row.phase, "")
        table.add_row(
            str(row.seq),
            row.tool,
            Text(row.phase, style=style),
            _short(_decoded(row.payload), 70),
            row.hash[:10] + "…",
        )
    return table


def _print_verification(check: Verification, console: Console) -> None:
    if check.ok:
        console.print(
            f"[green]Hash chain verified[/green]: {check.rows} rows, head seq {check.head_seq}, "
            f"head hash {check.head_hash}"
        )
    else:
        console.print(
            f"[red]Journal does NOT verify[/red] at seq {check.head_seq}: {check.problem}"
        )
    for line in check.anchors:
        console.print(f"  {line}")


def _shop_table(report: DemoReport) -> Table:
    table = _table("The shop, before and after", "", "before", "after")
    for product, count in report.before["available"].items():
        table.add_row(f"{product} in stock", str(count), str(report.after["available"][product]))
    for key, label in (
        ("held_reservations", "reservations held"),
        ("placed_orders", "orders placed"),
        ("outbox", "emails sent"),
    ):
        table.add_row(label, str(report.before[key]), str(report.after[key]))
    return table


def _print_recovery(act: Recovery, console: Console) -> None:
    took_over = (
        f"Worker 2 (pid {act.fresh_pid}) took over: Temporal retried {act.killed_tool} there "
        f"(attempt {act.attempt}) and the saga went on from its history and the journal."
        if act.retried_by_fresh
        else f"{act.killed_tool}'s outcome was written by attempt {act.attempt}."
    )
    console.print(
        Panel(
            Group(
                f"Worker 1 (pid {act.killed_pid}) was killed with SIGKILL during "
                f"{act.killed_tool}: the reservation was made, and the journal held the call's "
                f"INTENT (seq {act.killed_seq}) with no outcome.",
                took_over,
                f"Saga {act.saga_id}: [bold]{act.status}[/bold].",
            ),
            title="Act two: a worker dies in the middle of a call",
        )
    )
    console.print(_journal_table(act.saga_id, act.journal))
    _print_verification(act.verification, console)
    once = "[green]each call took effect once[/green]" if act.ran_once else "[red]NOT once[/red]"
    console.print(
        f"The shop: {act.reservations} reservation and {act.orders} order made by this saga, "
        f"{PRODUCT} in stock {act.stock_before} → {act.stock_after}: {once}."
    )
    console.print(
        "Why that was safe: the INTENT row is written before a tool runs, so the journal knew "
        f"a call was in flight; {act.killed_tool} is declared idempotent (its reservation id is "
        "derived from the saga id and the INTENT seq, and it looks for that reservation before "
        "making one), so it may run again; Temporal kept the saga's history, so worker 2 "
        "replayed it and went on. A tool not declared idempotent would have stopped as SUSPECT "
        "until a human said whether it took effect (`sagacity saga resolve`)."
    )


def render(report: DemoReport, console: Console) -> None:
    """Print the report for a person."""
    result = report.result
    console.print(
        Panel(
            f"[bold]{report.prompt}[/bold]\nmodel: {report.model}\n"
            f"injected fault: {report.fault or 'none (--no-fault)'}",
            title="Sagacity demo: an agent's tool calls as a saga",
        )
    )
    console.print(_steps_table(report))
    for approval in report.approvals:
        console.print(
            f"[cyan]Approval:[/cyan] {approval.tool} {approval.input} waited at journal seq "
            f"{approval.journal_seq}; approved by {approval.approver}."
        )
    saga = result.saga
    colour = "green" if saga.status is SagaState.COMPLETED else "yellow"
    console.print(f"\nSaga [bold {colour}]{saga.status.value}[/bold {colour}]", end="")
    console.print(f": {saga.error.message}" if saga.error else "")
    console.print(_compensation_table(report))
    if result.turns and result.turns[-1] != result.final_output:
        console.print(Panel(result.turns[-1], title="The agent, before the rollback"))
    console.print(Panel(result.final_output or "(no answer)", title="The agent's last word"))
    console.print(_journal_table(report.saga_id, report.journal))
    _print_verification(report.verification, console)
    console.print(_shop_table(report))
    console.print(
        "[green]Stock, orders and mail are back where they started.[/green]"
        if report.restored
        else "The shop changed: this run's effects stand."
    )
    if report.recovery is not None:
        _print_recovery(report.recovery, console)
    console.print(
        Panel(
            Group(
                f"database: {report.database_url}",
                f"tables:   {', '.join(report.tables)}",
                f"Temporal: {report.temporal_address} (workflow id {report.saga_id})",
                f"anchors:  {report.verification.checkpoint_dir} "
                f"(signing key {report.verification.key_id})",
                *(
                    ["the example shop was reset to its seed stock for this run"]
                    if report.shop_reset
                    else []
                ),
            ),
            title="Where the state is",
        )
    )


def main(*, no_fault: bool, no_crash: bool, as_json: bool, prompt: str | None) -> None:
    """The demo command's work (see :func:`sagacity.cli.demo.demo`)."""
    err = Console(stderr=True)
    try:
        settings = load_settings()
        if uses_scripted_model(settings):
            # no API key: the Agents SDK has nowhere to send traces, and warns at each try
            set_tracing_disabled(True)
        report = asyncio.run(
            run_demo(
                settings,
                fault=not no_fault,
                crash=not no_crash,
                prompt=prompt or PROMPT,
                say=lambda m: err.print(f"· {m}"),
            )
        )
    except (SagacityError, DevStackError) as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=2) + "\n")
    else:
        render(report, Console())
    act = report.recovery
    if not report.verification.ok or (act is not None and not act.verification.ok):
        raise typer.Exit(1)
