"""What every ``saga`` command shares: its arguments, settings, Temporal client, operator and exit.

A command's coroutine runs under :func:`run`, which turns :class:`Usage`, :class:`Stuck` and
Sagacity's own errors into one line on stderr and an exit status (the table is in the package's
docstring).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Annotated, Any, NoReturn

import typer
from temporalio.client import Client
from temporalio.service import RPCError

from sagacity.cli._common import signing_identity
from sagacity.cli._exit import exit_now
from sagacity.errors import InvalidInput, SagacityError, SagaNotFound
from sagacity.evidence.decisions import Keyring, Signer
from sagacity.observability import tracing
from sagacity.settings import Settings, load_settings
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.worker import connect

#: exit status of a saga that cannot move on (no worker, a failing workflow task)
STUCK = 3
#: exit status of a saga whose running compensation keeps failing (see ``undo_attempts``)
UNDO_FAILING = 4
#: Temporal's default limit on a workflow id's length
ID_MAX = 1000

SagaId = Annotated[str, typer.Argument(help="The saga id (its Temporal workflow id).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
Wait = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Return once the saga has ended, awaits a human, or its compensation keeps failing "
        "(exit 4).",
    ),
]


class Usage(Exception):
    """Bad usage: exit 2 with this message."""


class Stuck(SagacityError):
    """The saga's workflow cannot move on, for a reason Temporal can tell (exit 3)."""


def read_settings(**overrides: Any) -> Settings:
    """The settings, with the options given on the command line; bad ones are :class:`Usage`."""
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SagacityError as exc:
        raise Usage(str(exc)) from None


def run(work: Coroutine[Any, Any, int]) -> NoReturn:
    """Run a command's coroutine and exit with its status; errors are one line on stderr.

    Leaves through :func:`exit_now` itself: ``typer.Exit`` is not click's ``Exit`` (typer has
    its own class now), so ``hard_exit`` would not see it and the process would risk the SDK's
    teardown crash.
    """
    try:
        code = asyncio.run(work)
    except (Usage, InvalidInput, SagaNotFound) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 2
    except Stuck as exc:
        typer.echo(f"error: {exc}", err=True)
        code = STUCK
    except (SagacityError, RPCError) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 1
    exit_now(code)


@asynccontextmanager
async def connected(settings: Settings) -> AsyncIterator[Client]:
    """A Temporal client as the worker's (plugin, codec, tracing); unreachable is :class:`Usage`."""
    with tracing(settings, "sagacity-cli") as interceptors:
        try:
            client = await connect(
                settings, SagacityPlugin(codec=settings.payload_codec()), interceptors=interceptors
            )
        except SagacityError as exc:
            raise Usage(str(exc)) from None
        except RuntimeError as exc:  # the SDK's "Failed client connect: …"
            raise Usage(f"cannot reach Temporal at {settings.temporal_address}: {exc}") from None
        yield client


def keys(settings: Settings) -> tuple[Signer | None, Keyring | None]:
    """The operator's signing key (``SAGACITY_APPROVER_KEY``) and the keyring, or exit 2."""
    try:
        key = settings.approver_key
        return (Signer.open(key) if key else None), settings.load_keyring()
    except SagacityError as exc:
        raise Usage(str(exc)) from None


def operator(signer: Signer | None, keyring: Keyring | None) -> str:
    """Who the CLI acts as: whom the signing key signs for in the keyring, else the login."""
    try:
        return signing_identity(signer, keyring)
    except (OSError, KeyError):  # no user name in this environment (a bare container)
        raise Usage("no user name found: pass --by NAME") from None
