"""``sagacity worker``: the long-lived worker process (see :mod:`sagacity.worker`)."""

from __future__ import annotations

from typing import Annotated

import typer

from sagacity.cli._exit import exit_now, hard_exit
from sagacity.errors import SagacityError, SettingsError

__all__ = ["worker"]


@hard_exit
def worker(
    app: Annotated[
        list[str] | None,
        typer.Option(
            "--app",
            help="App module to serve (TOOLS, WORKFLOWS, lifespan, plugins), importable from the "
            "current directory or PYTHONPATH; repeat for more.",
            show_default="workflows.order.app",
        ),
    ] = None,
    task_queue: Annotated[
        str | None,
        typer.Option(
            "--task-queue", help="Task queue to poll (SAGACITY_TASK_QUEUE).", show_default=False
        ),
    ] = None,
) -> None:
    """Serve sagas until SIGTERM or Ctrl-C, then let in-flight calls finish (graceful shutdown).

    An app module is imported from the current directory or PYTHONPATH.
    """
    from sagacity.worker import DEFAULT_APP, main

    overrides = {"task_queue": task_queue} if task_queue else {}
    try:
        main(app or [DEFAULT_APP], **overrides)
    # not typer.Exit below: hard_exit does not catch typer's own Exit class
    except SettingsError as exc:
        typer.echo(f"error: {exc}", err=True)
        exit_now(2)
    except SagacityError as exc:  # the journal database is unreachable, say
        typer.echo(f"error: {exc}", err=True)
        exit_now(1)
