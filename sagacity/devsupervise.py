"""Supervision of the dev stack's servers: one that dies is restarted with its data, or the stack ends.

``sagacity dev`` runs :func:`supervise` beside its wait for Ctrl-C. It looks at the Temporal dev
server's process and the embedded Postgres's postmaster twice a second. One that is gone (a
crash, an OOM kill, a stray ``kill -9``) is started again on the same port with the same state
file, or on the same cluster folder and socket, so the exports other terminals hold stay right
and workers and clients reconnect on their own; each restart is said in one line naming the
server. A server that dies more than :attr:`RestartBudget.limit` times within
:attr:`RestartBudget.window_s` seconds, or does not come back, ends the stack with
:class:`~sagacity.errors.DevStackError` naming it, rather than restart it for ever.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sagacity.devstack import DevStack
from sagacity.errors import DevStackError

__all__ = ["DEFAULT_RESTARTS", "RESTART_WINDOW_S", "RestartBudget", "supervise"]

#: restarts allowed per server within :data:`RESTART_WINDOW_S`
DEFAULT_RESTARTS = 3
RESTART_WINDOW_S = 60.0
#: how often the servers are looked at
POLL_S = 0.5

TEMPORAL = "Temporal dev server"
POSTGRES = "embedded Postgres"


@dataclass
class RestartBudget:
    """At most ``limit`` restarts within any ``window_s`` seconds, for one server."""

    limit: int = DEFAULT_RESTARTS
    window_s: float = RESTART_WINDOW_S
    _times: deque[float] = field(default_factory=deque)

    def spend(self, now: float) -> bool:
        """Count a restart at ``now``; False when it would exceed the budget."""
        while self._times and now - self._times[0] > self.window_s:
            self._times.popleft()
        if len(self._times) >= self.limit:
            return False
        self._times.append(now)
        return True

    @property
    def used(self) -> int:
        return len(self._times)


async def supervise(
    stack: DevStack,
    say: Callable[[str], None],
    *,
    restarts: int = DEFAULT_RESTARTS,
    window_s: float = RESTART_WINDOW_S,
) -> None:
    """Watch ``stack``'s servers until cancelled; restart one that dies, within the budget.

    Raises :class:`DevStackError` naming the server when it dies past its budget or cannot be
    started again.
    """
    budgets = {
        TEMPORAL: RestartBudget(restarts, window_s),
        POSTGRES: RestartBudget(restarts, window_s),
    }
    while True:
        await asyncio.sleep(POLL_S)
        code = stack.temporal_exit_code()
        if code is not None:
            how = f"exited with code {code}"
            _allow(budgets[TEMPORAL], TEMPORAL, how, stack.temporal_log)
            await _restart_temporal(stack, say, how, budgets[TEMPORAL])
        if stack.postgres_down():
            how = "its postmaster is gone"
            _allow(budgets[POSTGRES], POSTGRES, how, stack.postgres_log)
            await _restart_postgres(stack, say, how, budgets[POSTGRES])


def _allow(budget: RestartBudget, server: str, how: str, log: Path | None) -> None:
    """Spend a restart of ``server``, or raise: it died past its budget."""
    if budget.spend(time.monotonic()):
        return
    if budget.limit == 0:
        why = f"the {server} died ({how}) and restarts are off (--restarts 0)"
    else:
        why = (
            f"the {server} died again ({how}) after {budget.used} restarts within "
            f"{budget.window_s:.0f}s"
        )
    raise DevStackError(f"{why}; stopping the stack. Its log is {log}")


def _said(server: str, how: str, where: str, budget: RestartBudget, seconds: float) -> str:
    return (
        f"restarted the {server} ({how}) {where} in {seconds:.1f}s "
        f"[restart {budget.used} of {budget.limit} allowed within {budget.window_s:.0f}s]"
    )


async def _restart_temporal(
    stack: DevStack, say: Callable[[str], None], how: str, budget: RestartBudget
) -> None:
    began = time.monotonic()
    try:
        await stack.restart_temporal()  # the dead process is reaped, then spawned again
    except DevStackError as exc:
        raise DevStackError(f"the {TEMPORAL} died ({how}) and did not start again: {exc}") from None
    state = stack.temporal_state
    where = f"on {stack.endpoints.temporal_address}" + (
        f" with its state file {state}" if state else " (in memory: its state is lost)"
    )
    say(_said(TEMPORAL, how, where, budget, time.monotonic() - began))


async def _restart_postgres(
    stack: DevStack, say: Callable[[str], None], how: str, budget: RestartBudget
) -> None:
    began = time.monotonic()
    deadline = began + stack.start_timeout
    while True:
        try:
            await stack.start_postgres()
            break
        except (subprocess.SubprocessError, OSError, AssertionError, DevStackError) as exc:
            # a killed postmaster's backends hold its shared memory until they notice: try again
            if time.monotonic() > deadline:
                raise DevStackError(
                    f"the {POSTGRES} died ({how}) and did not start again ({exc}); "
                    f"its log is {stack.postgres_log}"
                ) from None
            await asyncio.sleep(1.0)
    log = stack.postgres_log
    where = f"on its cluster {log.parent}" if log is not None else ""
    say(_said(POSTGRES, how, where, budget, time.monotonic() - began))
