"""``sagacity halt``, ``resume``, ``halts`` and ``saga quarantine`` / ``release``: the kill switch.

A halt is written as the tables' owner (``SAGACITY_OWNER_DATABASE_URL``, else the database
URL), signed with ``SAGACITY_APPROVER_KEY`` as the operator; with ``SAGACITY_KEYRING`` set, a key
the keyring does not trust for that operator is refused and nothing is written. Exit 0 when
done, 2 for bad input or settings, 1 when the database or Temporal refused.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Annotated

import typer
from pydantic import BaseModel
from rich.console import Console
from rich.table import Table

from sagacity.approvals.halts import HaltResult, HaltService
from sagacity.cli._common import (
    decision_keys_or_exit,
    fail,
    run_or_exit,
    service_settings_or_exit,
    signing_identity,
)
from sagacity.cli._exit import hard_exit
from sagacity.errors import InvalidInput
from sagacity.store import JournalStore, open_pool
from sagacity.store.halts import Halt, HaltNotFound, HaltPolicy, HaltScope, HaltStore
from sagacity.worker import connect_client

__all__ = ["halt", "halts", "quarantine", "release", "resume"]

Reason = Annotated[
    str,
    typer.Option("--reason", help="Why: recorded and signed with the halt.", show_default=False),
]
Operator = Annotated[
    str | None,
    typer.Option(
        "--as",
        help="Who acts: recorded and signed. Default: whom SAGACITY_APPROVER_KEY signs for in "
        "the keyring, else your user name.",
        show_default=False,
    ),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON.")]


@contextlib.asynccontextmanager
async def _service() -> AsyncIterator[HaltService]:
    settings = service_settings_or_exit()
    signer, keyring = decision_keys_or_exit(settings.approver_key, settings)
    url = settings.owner_database_url or settings.database_url
    assert url is not None
    pool = await open_pool(url, min_size=1, max_size=4)
    try:
        client = await connect_client(settings)
        yield HaltService(
            client, HaltStore(pool), JournalStore(pool), signer=signer, keyring=keyring
        )
    finally:
        await pool.close()


def _operator(service: HaltService, given: str | None) -> str:
    return given or signing_identity(service.signer, service.keyring)


@hard_exit
def halt(
    reason: Reason,
    tool: Annotated[
        str | None, typer.Option("--tool", help="Only calls of this tool.", show_default=False)
    ] = None,
    task_queue: Annotated[
        str | None,
        typer.Option(
            "--task-queue", help="Only workers of this task queue (an app).", show_default=False
        ),
    ] = None,
    saga: Annotated[
        list[str] | None,
        typer.Option("--saga", help="Only this saga (repeatable).", show_default=False),
    ] = None,
    search: Annotated[
        str | None,
        typer.Option(
            "--search",
            help="Only the sagas this Temporal visibility query finds now, e.g. "
            "'WorkflowType=\"OrderSaga\"'.",
            show_default=False,
        ),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            help="keep: freeze the halted sagas' effects (compensations wait too); compensate: "
            "undo their REVERSIBLE and COMPENSATABLE effects. Calls awaiting approval stay "
            "waiting either way.",
        ),
    ] = "keep",
    operator: Operator = None,
    settle: Annotated[
        float,
        typer.Option(
            "--settle",
            min=0,
            max=3600,
            help="Seconds running calls get to finish before the report (an hour at most).",
        ),
    ] = 10.0,
    as_json: AsJson = False,
) -> None:
    """Stop new side effects now: no call the halt covers starts, on any worker.

    Without --tool, --task-queue, --saga or --search it halts everything. Prints the halt
    report: every effect still live in the sagas it reached.
    """
    if policy not in ("keep", "compensate"):
        raise fail(f"--policy must be keep or compensate, not {policy!r}")
    chosen: HaltPolicy = "keep" if policy == "keep" else "compensate"

    async def go() -> HaltResult:
        async with _service() as service:
            sagas = tuple(saga) if saga else None
            if search is not None:
                found = await _search(service, search)
                sagas = tuple(s for s in found if sagas is None or s in sagas)
                if not sagas:
                    raise InvalidInput(f"the search {search!r} finds no running saga")
            scope = HaltScope(tool=tool, task_queue=task_queue, sagas=sagas)
            return await service.halt(
                scope=scope,
                policy=chosen,
                reason=reason,
                operator=_operator(service, operator),
                settle=timedelta(seconds=settle),
            )

    result = run_or_exit(go())
    for warning in result.warnings:
        typer.echo(f"warning: {warning}", err=True)
    if as_json:
        _print_json(result)
        return
    signed = "signed" if result.signed else "UNSIGNED (no SAGACITY_APPROVER_KEY)"
    typer.echo(
        f"halt {result.halt_id} in force since {result.halted_at.isoformat()} ({signed}); "
        f"{len(result.signalled)} running saga(s) told"
    )
    _print_report(result)


async def _search(service: HaltService, query: str) -> list[str]:
    return [s for s, _ in await service.reached_by_query(query)]


def _print_report(result: HaltResult) -> None:
    report = result.report
    if not report.live:
        typer.echo(f"halt report: no live effect in {len(report.sagas)} saga(s)")
        return
    table = Table(title=f"halt report: live effects in {len(report.sagas)} saga(s)")
    for column in ("saga", "seq", "tool", "state"):
        table.add_column(column)
    for effect in report.live:
        table.add_row(effect.saga_id, str(effect.seq), effect.tool, effect.state)
    Console(width=160).print(table)


@hard_exit
def resume(
    reason: Reason,
    halt_id: Annotated[
        int | None,
        typer.Argument(min=1, help="The halt to lift (see `sagacity halts`).", show_default=False),
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Lift every active halt.")] = False,
    operator: Operator = None,
) -> None:
    """Lift a halt: the sagas it held go on from where they stopped."""
    if (halt_id is None) == (not every):
        raise fail("name one halt, or --all")

    async def go() -> list[tuple[Halt, list[str]]]:
        async with _service() as service:
            who = _operator(service, operator)
            ids = (
                [h.id for h in await service.active()]
                if every
                else [halt_id]
                if halt_id is not None
                else []
            )
            return [await service.resume(i, by=who, reason=reason) for i in ids]

    done = run_or_exit(go())
    if not done:
        typer.echo("no halt in force: nothing to lift")
    for lifted, told in done:
        typer.echo(
            f"halt {lifted.id} lifted by {lifted.lifted_by}; {len(told)} running saga(s) told"
        )


@hard_exit
def halts(
    every: Annotated[bool, typer.Option("--all", help="Lifted halts too.")] = False,
    as_json: AsJson = False,
) -> None:
    """List halts and quarantines, newest first, each checked: in the gate, signatures verified
    against the keyring, times as signed, no copies."""

    async def go() -> list[tuple[Halt, list[str]]]:
        async with _service() as service:
            return await service.listing(active=not every)

    rows = [
        {
            "id": h.id,
            "kind": h.kind,
            "scope": h.scope.describe(),
            "policy": h.policy,
            "operator": h.operator,
            "reason": h.reason,
            "halted_at": h.halted_at.isoformat(),
            "lifted_at": h.lifted_at.isoformat() if h.lifted_at else None,
            "lifted_by": h.lifted_by,
            "live_effects": len(h.report.get("live", [])) if h.report else None,
            "problems": problems,
        }
        for h, problems in run_or_exit(go())
    ]
    if as_json:
        typer.echo(json.dumps(rows, indent=2, ensure_ascii=False))
        return
    if not rows:
        typer.echo("no halt in force" if not every else "no halt recorded")
        return
    table = Table()
    for column in ("id", "kind", "covers", "policy", "by", "since", "lifted", "signatures"):
        table.add_column(column)
    for row in rows:
        problems = row["problems"]
        table.add_row(
            str(row["id"]),
            str(row["kind"]),
            str(row["scope"]),
            str(row["policy"]),
            str(row["operator"]),
            str(row["halted_at"]),
            str(row["lifted_at"] or "-"),
            "; ".join(problems) if isinstance(problems, list) and problems else "ok",
        )
    Console(width=200).print(table)


@hard_exit
def quarantine(
    saga_id: Annotated[str, typer.Argument(help="The saga to freeze.", show_default=False)],
    reason: Reason,
    operator: Operator = None,
) -> None:
    """Freeze one saga for investigation: no further call or compensation until released."""

    async def go() -> HaltResult:
        async with _service() as service:
            return await service.halt(
                kind="quarantine",
                scope=HaltScope(sagas=(saga_id,)),
                policy="keep",
                reason=reason,
                operator=_operator(service, operator),
                settle=timedelta(0),
            )

    result = run_or_exit(go())
    typer.echo(f"saga {saga_id} quarantined (halt {result.halt_id})")
    _print_report(result)


@hard_exit
def release(
    saga_id: Annotated[str, typer.Argument(help="The quarantined saga.", show_default=False)],
    reason: Reason,
    operator: Operator = None,
) -> None:
    """Release a quarantined saga: it goes on from where it stopped."""

    async def go() -> list[Halt]:
        async with _service() as service:
            held = [
                h
                for h in await service.active()
                if h.kind == "quarantine" and h.scope.sagas == (saga_id,)
            ]
            if not held:
                raise HaltNotFound(f"saga {saga_id!r} is not quarantined")
            who = _operator(service, operator)
            return [(await service.resume(h.id, by=who, reason=reason))[0] for h in held]

    for lifted in run_or_exit(go()):
        typer.echo(f"saga {saga_id} released (halt {lifted.id} lifted by {lifted.lifted_by})")


def _print_json(value: BaseModel) -> None:
    typer.echo(json.dumps(value.model_dump(mode="json"), indent=2, ensure_ascii=False))
