"""``sagacity reconcile``: compare what the journal says with what the tools' probes find.

Loads the apps a worker serves (``--app``, as ``sagacity worker`` does, lifespans included),
runs the probe of each journaled call whose tool declares one, and prints the calls where the
journal and the world disagree. ``--resolve-suspects`` resolves each SUSPECT call as its probe
says, through the saga's ``resolve`` signal, as ``probe:<tool>``.

Exit 0 when nothing needs a person; 1 on drift, a SUSPECT call left unresolved, a probe that
failed, or an effect left live by a saga whose workflow closed unfinished (terminated, timed out:
``sagacity saga rollback`` undoes it), each printed with saga, seq and tool; 2 when it could not reconcile (bad input, unknown
saga, an app that does not load or declares no probe, no database or Temporal): one line on
stderr, and nothing resolved.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Coroutine, Sequence
from contextlib import AsyncExitStack
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from temporalio.client import Client

from sagacity.approvals.suspects import resolve_suspect
from sagacity.cli._common import decision_keys_or_exit, fail, settings_or_exit
from sagacity.cli._exit import hard_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.errors import SagacityError
from sagacity.evidence.decisions import Keyring, Signer
from sagacity.evidence.reconcile import Check, Reconciliation, Verdict, reconcile
from sagacity.inputs import check_name
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.runs import RunChains
from sagacity.tools import ToolRegistry
from sagacity.worker import DEFAULT_APP, App, connect_client, load_apps

__all__ = ["reconcile_command"]


class _Refused(Exception):
    """Reconciling cannot start: exit 2 with this message, nothing changed."""


@hard_exit
def reconcile_command(
    saga: Annotated[
        str | None, typer.Argument(help="The saga to reconcile (or --all).", show_default=False)
    ] = None,
    every: Annotated[bool, typer.Option("--all", help="Every saga in the journal.")] = False,
    app: Annotated[
        list[str] | None,
        typer.Option(
            "--app",
            help="Module with TOOLS (and lifespan) whose probes to run; repeat for more.",
            show_default=DEFAULT_APP,
        ),
    ] = None,
    resolve_suspects: Annotated[
        bool,
        typer.Option(
            "--resolve-suspects",
            help="Resolve each SUSPECT call as its probe says (journaled as probe:<tool>).",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per saga.")] = False,
    database_url: Annotated[
        str | None,
        typer.Option("--database-url", help="Journal database (default: SAGACITY_DATABASE_URL)."),
    ] = None,
) -> None:
    """Report drift between the journal and the world: effects gone behind its back, effects
    still there after their compensation; settle SUSPECT calls from probes if allowed."""
    if (saga is not None) == every:
        raise fail("give a saga id or --all, not both")
    try:
        if saga is not None:
            check_name(saga, what="a saga id")
    except SagacityError as exc:
        raise fail(str(exc)) from None
    settings = settings_or_exit()
    url = journal_url_or_exit(database_url)
    # a probe's resolution is a service's word for the probe, as the approvals API's is for
    # whom it authenticated: the service key signs it where one is set (the dev stack sets one)
    signer, keyring = decision_keys_or_exit(settings.service_key or settings.approver_key, settings)
    apps = app or [DEFAULT_APP]

    async def work() -> list[Reconciliation]:
        loaded = _load(apps)
        async with AsyncExitStack() as stack:
            journal = await stack.enter_async_context(
                await JournalStore.open(url, min_size=1, max_size=2)
            )
            if saga is None:
                saga_ids = await journal.saga_ids()
            elif await journal.head(saga) is None:
                raise _Refused(f"no saga {saga!r} in the journal")
            else:
                saga_ids = [saga]
            client = await _client(settings) if resolve_suspects else None
            try:
                await loaded.enter(stack, settings, url)
            except Exception as exc:  # the app's own set-up: whatever it raises, say so
                raise _Refused(f"the apps' lifespan failed: {type(exc).__name__}: {exc}") from None
            tools = _probed(loaded, apps)
            done = []

            async def temporal() -> Client:
                return client if client is not None else await _client(settings)

            # a saga a workflow journaled is judged by how its run chain stands in Temporal
            async for found in reconcile(journal, tools, saga_ids, RunChains(temporal)):
                if client is not None:
                    for check in found.checks:
                        if check.verdict is Verdict.SUSPECT:
                            await _resolve(client, journal, check, settings, signer, keyring)
                done.append(found)
            return done

    sagas = _run(work())
    _print(sagas, as_json=as_json)
    raise typer.Exit(0 if all(s.clean for s in sagas) else 1)


def _run(work: Coroutine[Any, Any, list[Reconciliation]]) -> list[Reconciliation]:
    try:
        return asyncio.run(work)
    except (_Refused, SagacityError) as exc:
        raise fail(str(exc)) from None


def _load(apps: Sequence[str]) -> App:
    """The apps, as a worker loads them."""
    try:
        return load_apps(apps)
    except Exception as exc:  # importing the user's module runs its code: report any failure
        raise _Refused(f"cannot load app {', '.join(apps)}: {type(exc).__name__}: {exc}") from None


def _probed(loaded: App, apps: Sequence[str]) -> ToolRegistry:
    """The entered apps' tools; refused when no tool has a probe."""
    tools = ToolRegistry(loaded.tools)
    if not any(t.probe is not None for t in tools):
        raise _Refused(
            f"no tool of {', '.join(apps)} declares a probe: declare one with @<tool>.probe"
        )
    return tools


async def _client(settings: Settings) -> Client:
    try:
        return await connect_client(settings)
    except RuntimeError as exc:  # the SDK's "Failed client connect: …"
        raise _Refused(f"cannot reach Temporal at {settings.temporal_address}: {exc}") from None


async def _resolve(
    client: Client,
    journal: JournalStore,
    check: Check,
    settings: Settings,
    signer: Signer | None,
    keyring: Keyring | None,
) -> None:
    """Resolve the SUSPECT call ``check`` as its probe answered; the check says how it went."""
    resolver = f"probe:{check.tool_name}"
    try:
        done = await resolve_suspect(
            client,
            check.saga_id,
            check.seq,
            resolver=resolver,
            happened=bool(check.exists),
            result=check.found if check.exists else None,
            journal=journal,
            resolvers=settings.resolvers,
            signer=signer,
            keyring=keyring,
        )
    except SagacityError as exc:
        check.detail += f"; not resolved: {exc}"
        return
    said = "happened" if done.happened else "did not happen"
    check.verdict = Verdict.RESOLVED
    check.detail = f"{check.detail}; resolved by {resolver}: the call {said}" + (
        f", journaled {done.outcome} at seq {check.seq + 1}" if done.outcome else ""
    )


def _probe_said(check: Check) -> str:
    if check.exists is None:
        return "-"
    return "exists" if check.exists else "gone"


def _print(sagas: list[Reconciliation], *, as_json: bool) -> None:
    if as_json:
        for found in sagas:
            typer.echo(json.dumps(found.to_dict(), ensure_ascii=False))
    shown = [c for s in sagas for c in s.checks if c.verdict is not Verdict.OK]
    if shown and not as_json:
        table = Table("saga", "seq", "tool", "journal", "probe", "verdict", "detail")
        for c in shown:
            row = (c.journal, _probe_said(c), c.verdict.value, c.detail)
            table.add_row(c.saga_id, str(c.seq), c.tool_name, *row)
        Console().print(table)
    if not as_json:
        for f in (f for s in sagas for f in s.left_live):
            typer.echo(f"saga {f.saga_id}: {f.detail}")
    counts = Counter(c.verdict for s in sagas for c in s.checks)
    parts = [f"{n} {verdict.value}" for verdict in Verdict if (n := counts[verdict])]
    unprobed = sum(s.unprobed for s in sagas)
    typer.echo(
        f"{len(sagas)} sagas, {sum(counts.values())} calls probed: "
        f"{', '.join(parts) or 'none'}; {unprobed} calls of tools without a probe; "
        f"{sum(not s.clean for s in sagas)} sagas need a person",
        err=as_json,
    )
