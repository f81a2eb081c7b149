"""What several command groups share."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer

from sagacity.errors import InvalidInput, SagacityError

T = TypeVar("T")


def run_or_exit(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; bad input exits 2, any other Sagacity error (unreachable database, refused
    statement) 1, each with one line on stderr.
    """
    try:
        return asyncio.run(work)
    except InvalidInput as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
