"""What several command groups share."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import typer

from sagacity.errors import SagacityError

T = TypeVar("T")


def run_or_exit(work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; a Sagacity error (unreachable database, refused statement) exits 1."""
    try:
        return asyncio.run(work)
    except SagacityError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from None
