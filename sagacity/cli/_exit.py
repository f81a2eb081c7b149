"""End a process that used the Temporal SDK without letting interpreter teardown crash it.

Why this exists: the Temporal Python SDK runs its client and worker on a Rust (Tokio) runtime whose
threads outlive every Python object that used them; nothing in the SDK shuts that runtime down.
When the interpreter finalizes, one of those threads can still try to take the GIL and the process
dies with ``Fatal Python error: PyGILState_Release: thread state ... must be current when
releasing`` and SIGABRT (temporalio/sdk-python#300) -- *after* all the work finished and every
result was printed. A test run that passed, or a CLI command that succeeded, would then exit 134.

The fix is to not reach finalization: once everything we own has been shut down in order (workers
awaited, stacks stopped), flush stdio and logging and leave with :func:`os._exit`, carrying the
real exit status. Nothing that ran is hidden: the status is the one the program computed.

Two entry points:

* :func:`exit_now` -- call at the end of a short-lived command; :func:`hard_exit` wraps a typer
  command so that a normal return or ``typer.Exit(code)`` leaves this way.
* :func:`exit_at_shutdown` -- arm an ``atexit`` handler that does the same at the very start of
  interpreter shutdown (after ``main()`` returned and the program's own clean-up ran, before
  finalization). The test suite's ``conftest.py`` arms it with pytest's exit status.

``os._exit`` skips the remaining ``atexit`` handlers, so whatever must be stopped has to be stopped
before (``DevStack.stop`` stops the embedded Postgres itself). Set ``SAGACITY_SOFT_EXIT=1`` to skip
all of this (for example under ``coverage run``, whose data is saved by an ``atexit`` handler).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import sys
from collections.abc import Callable
from typing import NoReturn, ParamSpec, TypeVar

import typer
from click.exceptions import Exit

__all__ = ["exit_at_shutdown", "exit_now", "hard_exit", "soft_exit_requested"]

P = ParamSpec("P")
R = TypeVar("R")


def soft_exit_requested() -> bool:
    """True when ``SAGACITY_SOFT_EXIT`` asks for a normal interpreter exit."""
    return os.environ.get("SAGACITY_SOFT_EXIT", "").lower() in {"1", "true", "yes"}


def _flush() -> None:
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        if stream is None:
            continue
        with contextlib.suppress(OSError, ValueError):  # closed or broken: nothing more to say
            stream.flush()


def exit_now(code: int = 0) -> NoReturn:
    """Flush stdio and logging, then end the process with ``code`` and no interpreter teardown."""
    _flush()
    if soft_exit_requested():
        sys.exit(code)
    os._exit(code)


def _status(code: object) -> int:
    """Map a ``SystemExit``/``typer.Exit`` code the way the interpreter does."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def hard_exit(command: Callable[P, R]) -> Callable[P, R]:
    """Wrap a typer command: leave through :func:`exit_now` when it returns or exits.

    An exception other than an exit propagates unchanged, so click reports it as usual.
    """

    @functools.wraps(command)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            command(*args, **kwargs)
        except SystemExit as exc:
            exit_now(_status(exc.code))
        except (Exit, typer.Exit) as exc:  # typer bundles its own click: two Exit classes
            exit_now(exc.exit_code)
        exit_now(0)

    return wrapper


def exit_at_shutdown(status: Callable[[], int]) -> None:
    """At interpreter shutdown, leave with ``status()`` before finalization can crash.

    Registered last, the handler runs first among ``atexit`` handlers. If the program is ending on
    an uncaught exception (its traceback already printed), the status is 1 whatever ``status()``
    says, so a failure in late clean-up still fails.
    """
    if soft_exit_requested():
        return
    # pytest stores each failing test's exception in sys.last_value (for post-mortems); only a
    # newer one, set when the exception reached the top, means "uncaught"
    seen = getattr(sys, "last_value", None)

    def _leave() -> None:
        last = getattr(sys, "last_value", None)
        uncaught = last is not None and last is not seen
        code = 1 if uncaught else status()
        _flush()
        os._exit(code)

    atexit.register(_leave)
