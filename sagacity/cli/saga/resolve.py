"""``saga resolve``: a human's answer for a SUSPECT call (whether it took effect), sent to the saga.

The saga journals the answer as the call's outcome (EXECUTED or FAILED) and goes on; see
:func:`sagacity.approvals.suspects.resolve_suspect` for who may resolve and how it is signed.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Annotated

import typer

from sagacity.approvals.suspects import Resolution, resolve_suspect
from sagacity.cli._exit import hard_exit
from sagacity.cli.saga.found import over
from sagacity.cli.saga.shared import (
    AsJson,
    SagaId,
    Usage,
    connected,
    keys,
    operator,
    read_settings,
    run,
)
from sagacity.cli.saga.status import status_of
from sagacity.errors import SagacityError
from sagacity.inputs import check_name, load_json
from sagacity.settings import Settings
from sagacity.store import JournalStore


@hard_exit
def resolve(
    saga: SagaId,
    seq: Annotated[
        int,
        typer.Option(
            "--seq",
            min=1,
            help="Journal seq of the SUSPECT call's INTENT row (`saga status` shows it).",
            show_default=False,
        ),
    ],
    happened: Annotated[
        bool,
        typer.Option(
            "--happened/--did-not-happen",
            help="Whether the call took effect (look in the system it acts on).",
            show_default=False,
        ),
    ],
    result: Annotated[
        str | None,
        typer.Option(
            "--result",
            help="With --happened: what the call returned, as JSON, for later steps and its "
            "compensation.",
            show_default=False,
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who resolves (default: whom SAGACITY_APPROVER_KEY signs for in the keyring, "
            "else your user name); journaled.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", min=0.5, max=600, help="Seconds to wait for the saga to take it."
        ),
    ] = 10.0,
    as_json: AsJson = False,
) -> None:
    """Say whether a SUSPECT call took effect: the saga journals it (EXECUTED or FAILED) and goes on.

    Exit 0 once the saga took the resolution; 1 if it refused it, has no SUSPECT call at that
    seq, or did not take it within --timeout; 2 for bad input or an unknown saga.
    """

    async def work() -> int:
        if result is not None and not happened:
            raise Usage("--result is only for a call that happened (--happened)")
        value = None if result is None else load_json(result, what="--result")
        settings = read_settings()
        signer, keyring = keys(settings)
        resolver = check_name(by if by is not None else operator(signer, keyring), what="--by")
        async with connected(settings) as client:
            current = await status_of(client, client.get_workflow_handle(saga))
            if over(saga, current):
                return 1
            journal = await _journal(settings)
            try:
                done = await resolve_suspect(
                    client,
                    saga,
                    seq,
                    resolver=resolver,
                    happened=happened,
                    result=value,
                    journal=journal,
                    wait=timedelta(seconds=timeout),
                    resolvers=settings.resolvers,
                    signer=signer,
                    keyring=keyring,
                )
            finally:
                if journal is not None:
                    await journal.close()
        if as_json:
            typer.echo(done.model_dump_json(indent=2))
        else:
            typer.echo(_resolved(done))
        return 0

    run(work())


async def _journal(settings: Settings) -> JournalStore | None:
    """The journal, to read what a resolution wrote; None (ask the saga instead) if out of reach."""
    if not settings.database_url:
        return None
    try:
        return await JournalStore.open(settings.database_url, min_size=1, max_size=1)
    except SagacityError:
        return None


def _resolved(done: Resolution) -> str:
    said = "happened" if done.happened else "did not happen"
    line = (
        f"saga {done.saga_id} took the resolution: {done.tool_name} at seq {done.call_seq} "
        f"{said} (resolved by {done.resolver})"
    )
    if done.outcome is None:
        return line + "; its outcome row is not journaled yet (see `sagacity saga journal`)"
    line += f"; journaled {done.outcome} at seq {done.call_seq + 1}"
    if (done.outcome == "EXECUTED") != done.happened:
        line += " (written by the attempt the worker lost: the call's own outcome stands)"
    return line
