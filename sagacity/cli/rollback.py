"""``sagacity saga rollback``: undo what an ended saga left live, as a workflow of its own.

A saga whose workflow was terminated, timed out or failed around the engine leaves its effects
live (``sagacity certify`` names them). This runs their compensations, newest first, journaled
in the saga's own chain after a row saying who rolled it back and why.

Exit 0: every live effect compensated (without ``--wait``: the rollback started); 1: a
compensation failed every attempt (journaled COMPENSATION_FAILED, for a human) or an effect
nothing can undo stays live; 2: refused (the saga still runs, was rolled back already or has a
rollback running, left nothing live, is unknown) or bad usage (no Temporal to reach included),
one line on stderr; 3: the journal database cannot be read (unreachable, or it refuses: not
migrated, no privilege), so nothing was started or undone, one line on stderr saying why. With
``--wait`` an unreachable journal is waited out first, for up to ``SAGACITY_OUTAGE_WINDOW``
(the workers' own allowance, 10 minutes by default), one line on stderr per wait.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Annotated, NoReturn, TypeVar

import typer
from temporalio.client import Client, WorkflowExecutionStatus, WorkflowFailureError
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from sagacity.approvals.rollbacks import RollbackRefused, ended, start_rollback
from sagacity.cli._common import signing_identity, temporal_client
from sagacity.cli._exit import exit_now, hard_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.errors import InvalidInput, SagacityError, StoreUnavailable
from sagacity.evidence.certify import Finding
from sagacity.inputs import check_name
from sagacity.journal import Entry
from sagacity.settings import Settings, load_settings
from sagacity.store import JournalStore
from sagacity.store.db import unreachable
from sagacity.temporal.models import Compensating, Head
from sagacity.temporal.rollback import (
    ALREADY_ROLLED_BACK,
    NOTHING_LIVE,
    RollbackResult,
    rollback_id,
)
from sagacity.temporal.undo_attempts import attempts, failing, reason

__all__ = ["JOURNAL_UNREACHABLE", "LeftBehind", "left_behind", "live_lines", "rollback"]

#: exit status when the journal cannot be read: not "an undo failed" (1), since none was tried;
#: as for ``saga status`` of a saga that cannot move on and ``doctor`` without its database
JOURNAL_UNREACHABLE = 3
#: the longest pause between two tries at an unreachable journal (from 1 s, doubling)
RETRY_MAX_S = 5.0

T = TypeVar("T")


@hard_exit
def rollback(
    saga: Annotated[str, typer.Argument(help="The ended saga's id.")],
    reason: Annotated[
        str,
        typer.Option("--reason", help="Why; journaled with who rolled it back."),
    ] = "rolled back by an operator",
    by: Annotated[
        str | None,
        typer.Option(
            "--by", help="Who rolls it back (default: your user name).", show_default=False
        ),
    ] = None,
    wait: Annotated[
        bool,
        typer.Option(
            "--wait",
            help="Wait for every compensation; the exit code says. Waits out an unreachable "
            "journal database first, for up to SAGACITY_OUTAGE_WINDOW.",
        ),
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")] = False,
    attempts: Annotated[
        int | None,
        typer.Option(
            "--attempts",
            min=1,
            max=1000,
            help="Attempts at each compensation before it is journaled COMPENSATION_FAILED "
            "(default: 20, as a saga's).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Compensate, newest first, the effects an ended saga (terminated, timed out) left live."""
    try:
        check_name(saga, what="a saga id")
        settings = load_settings()
        who = by or signing_identity(None, None)
    except (SagacityError, OSError, KeyError) as exc:
        _refused(str(exc) if isinstance(exc, SagacityError) else "no user name: pass --by NAME")
    url = journal_url_or_exit(None)

    async def work() -> int:
        try:
            client = await temporal_client(settings)
        except SagacityError as exc:  # as every `saga` command: no Temporal is bad usage
            raise InvalidInput(str(exc)) from None
        ended, handle = await _with_journal(
            url,
            lambda journal: start_rollback(
                client,
                journal,
                saga,
                by=who,
                reason=reason,
                task_queue=settings.task_queue,
                attempts=attempts,
            ),
            patience=settings.outage_window if wait else None,
        )
        typer.echo(f"rolling back saga {saga} as {who} (workflow {handle.id}):", err=True)
        for finding in ended.live:
            typer.echo(f"  live: {finding.detail}", err=True)
        if not wait:
            if as_json:
                typer.echo(json.dumps({"saga_id": saga, "workflow_id": handle.id}))
            return 0
        try:
            result = await handle.result()
        except WorkflowFailureError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.type in (
                ALREADY_ROLLED_BACK,
                NOTHING_LIVE,
            ):
                raise InvalidInput(cause.message) from None
            raise SagacityError(f"the rollback of {saga} did not complete: {cause}") from None
        _print(result, as_json=as_json)
        return 0 if result.ok else 1

    try:
        code = asyncio.run(work())
    except InvalidInput as exc:
        _refused(str(exc))
    except StoreUnavailable as exc:
        typer.echo(f"error: {_one_line(exc)}", err=True)
        code = JOURNAL_UNREACHABLE
    except (SagacityError, RPCError) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 1
    exit_now(code)


async def _with_journal(
    url: str, use: Callable[[JournalStore], Awaitable[T]], *, patience: timedelta | None
) -> T:
    """``use`` a journal opened at ``url``, all again from the start while the database is
    unreachable, for up to ``patience`` (None: not at all), with one line on stderr per wait:
    the rollback writes nothing before it has read the journal, so a try that failed changed
    nothing. :class:`StoreUnavailable` saying nothing was rolled back when the journal stays
    unreachable or refuses."""
    deadline = time.monotonic() + (patience or timedelta(0)).total_seconds()
    pause = 1.0
    while True:
        try:
            async with await JournalStore.open(url, min_size=1, max_size=2) as journal:
                return await use(journal)
        except StoreUnavailable as exc:
            if not unreachable(exc):
                raise StoreUnavailable(f"{exc}; nothing was rolled back") from exc
            if patience is None:
                raise StoreUnavailable(
                    f"the journal database is unreachable: {_one_line(exc)}; nothing was rolled "
                    "back: run it again once the database is back, or with --wait to wait it out"
                ) from exc
            left = deadline - time.monotonic()
            if left <= 0:
                raise StoreUnavailable(
                    f"the journal database stayed unreachable for {patience.total_seconds():.0f}"
                    f" s (SAGACITY_OUTAGE_WINDOW): {_one_line(exc)}; nothing was rolled back"
                ) from exc
            nap = min(pause, left)
            typer.echo(
                f"the journal database is unreachable, trying again in {round(nap, 1):g} s "
                f"(for up to {left:.0f} s more): {_one_line(exc)}",
                err=True,
            )
            await asyncio.sleep(nap)
            pause = min(pause * 2, RETRY_MAX_S)


def _one_line(exc: BaseException) -> str:
    """``exc``'s message on one line (libpq's end with a hint on a line of its own)."""
    return " ".join(str(exc).split())


def _refused(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    exit_now(2)


def _print(result: RollbackResult, *, as_json: bool) -> None:
    if as_json:
        typer.echo(result.model_dump_json(indent=2))
        return
    done = ", ".join(f"{u.tool_name} (call seq {u.call_seq})" for u in result.compensated)
    typer.echo(f"saga {result.saga_id} rolled back: compensated {done or 'nothing'}")
    for undo in result.failed:
        typer.echo(
            f"  COMPENSATION FAILED: {undo.tool_name} (call seq {undo.call_seq}) is still "
            "live: a human must undo it"
        )
    for live in result.stays_live:
        typer.echo(f"  stays live (no compensation declared): {live}")


@dataclass(frozen=True)
class LeftBehind:
    """What a saga whose workflow closed unfinished left, as its journal tells it: its rows, the
    effects left live, and the compensation its running rollback is at (None: none runs)."""

    saga_id: str
    rows: list[Entry]
    live: list[Finding]
    undoing: Compensating | None

    @property
    def head(self) -> Head:
        last = self.rows[-1] if self.rows else None
        return Head() if last is None else Head(seq=last.seq, hash=last.hash)

    @property
    def effects(self) -> list[tuple[str, int, str]]:
        """Each effect left live: its tool, its call's INTENT seq, and certify's finding of it."""
        tools = {r.seq: r.tool_name for r in self.rows}
        return [(tools[f.seq], f.seq, f.detail) for f in self.live if f.seq is not None]

    @property
    def rollback_line(self) -> str | None:
        """Where its running rollback is, in words; None when none runs or it is between undos."""
        undoing = self.undoing
        if undoing is None:
            return None
        return (
            f"a rollback of it runs (workflow {rollback_id(self.saga_id)}), compensating "
            f"{undoing.tool_name} (call seq {undoing.call_seq}), attempt {undoing.attempt}"
        )

    @property
    def undo_failing(self) -> str | None:
        """Why its running rollback's undo keeps failing; None unless it does."""
        undoing = self.undoing
        return reason(self.saga_id, undoing) if undoing and failing(undoing) else None


async def left_behind(client: Client, settings: Settings, saga_id: str) -> LeftBehind | None:
    """What the saga left, for ``saga status``; None when the journal is out of reach (the
    status says what it can without)."""
    if not settings.database_url:
        return None
    try:
        async with await JournalStore.open(settings.database_url, min_size=1, max_size=1) as j:
            try:
                saga = await ended(client, j, saga_id)
            except RollbackRefused:  # no workflow journaled it: nothing it left
                return LeftBehind(saga_id, [], [], None)
            undoing = await _rollback_undo(client, j, saga_id, saga.live)
    except (SagacityError, RPCError):
        return None
    return LeftBehind(saga_id, saga.rows, saga.live, undoing)


def live_lines(left: LeftBehind | None) -> list[str]:
    """A line for each effect the saga left live, and a line for its rollback when one runs."""
    if left is None:
        return []
    lines = [f"  live: {f.detail}" for f in left.live]
    running = left.rollback_line
    return lines if running is None else [*lines, f"  {running}"]


async def _rollback_undo(
    client: Client, journal: JournalStore, saga_id: str, live: list[Finding]
) -> Compensating | None:
    """The compensation the saga's running rollback is at, with its attempts; None when no
    rollback of it runs or it is between undos. It undoes newest first: the newest live one."""
    seqs = [f.seq for f in live if f.seq is not None]
    if not seqs:
        return None
    try:
        described = await client.get_workflow_handle(rollback_id(saga_id)).describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            return None
        raise
    if described.status is not WorkflowExecutionStatus.RUNNING:
        return None
    intent = await journal.get(saga_id, max(seqs))
    if intent is None:
        return None
    return await attempts(
        client, Compensating(tool_name=intent.tool_name, call_seq=intent.seq), described
    )
