"""Keeping an activity attempt alive: heartbeats that carry what earlier attempts left, and
waiting out a journal database outage."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, TypeVar

from temporalio import activity

from sagacity.errors import StoreUnavailable
from sagacity.journal import to_json
from sagacity.temporal import limits

__all__ = ["Heartbeat", "current_beat", "heartbeating", "outlast"]

_log = logging.getLogger(__name__)

T = TypeVar("T")


class Heartbeat:
    """An attempt's heartbeats, always carrying the details an earlier attempt left.

    Temporal keeps only the latest details: a beat without them would erase an outcome a
    previous attempt could not write, and its retry would take a known result for SUSPECT.
    """

    def __init__(self) -> None:
        self.details: tuple[Any, ...] = tuple(activity.info().heartbeat_details)
        #: an outcome this attempt has but has not written yet: (status, payload), the payload
        #: unredacted, so a retry can hand the workflow the tool's real result
        self.outcome: tuple[str, str] | None = None

    def beat(self) -> None:
        if self.outcome is not None:
            # encoded only when a beat is due: most calls write their row first
            status, payload = self.outcome
            details = to_json({"status": status, "payload": payload})
            # too large for a heartbeat, which Temporal would refuse: a retry finds no outcome
            # (SUSPECT, or an idempotent tool run again) rather than a failed activity
            if limits.json_size(details) <= limits.MAX_VALUE_BYTES:
                self.details = (details,)
        activity.heartbeat(*self.details)


_BEAT: ContextVar[Heartbeat | None] = ContextVar("sagacity_beat", default=None)


def current_beat() -> Heartbeat | None:
    """The heartbeats of the attempt running in this context (None: a local activity's)."""
    return _BEAT.get()


@contextlib.asynccontextmanager
async def heartbeating() -> AsyncIterator[Heartbeat]:
    """Heartbeat while the body runs, so a dead worker is noticed within the heartbeat timeout."""
    timeout = activity.info().heartbeat_timeout
    interval = max(timeout.total_seconds() / 3, 0.1) if timeout else 10.0
    beats = Heartbeat()
    # the first beat waits a third of the timeout: a fast call sends none at all. A timer, not
    # a task: nothing to create, cancel and await per activity (it runs in this context, the
    # activity's, which heartbeat() needs)
    ticks = _Ticks(beats, interval)
    token = _BEAT.set(beats)
    try:
        yield beats
    finally:
        _BEAT.reset(token)
        ticks.stop()


class _Ticks:
    """``beats`` every ``interval`` seconds until stopped. An object, not a closure that
    schedules itself: that closure is a reference cycle per activity, which only the cyclic
    garbage collector frees; a stopped timer drops its callback, and nothing is left cyclic."""

    def __init__(self, beats: Heartbeat, interval: float) -> None:
        self._beats = beats
        self._interval = interval
        self._loop = asyncio.get_running_loop()
        self._timer = self._loop.call_later(interval, self._tick)

    def _tick(self) -> None:
        # rescheduled first: a beat that raises stops none after it
        self._timer = self._loop.call_later(self._interval, self._tick)
        self._beats.beat()

    def stop(self) -> None:
        self._timer.cancel()


async def outlast(window: timedelta, op: Callable[[], Awaitable[T]]) -> T:
    """Run a database operation, waiting out an outage of up to ``window``.

    The attempt stays alive meanwhile (heartbeats carry its details), so an outage costs
    neither a retry nor a false SUSPECT.
    """
    deadline = time.monotonic() + window.total_seconds()
    pause = 0.5
    while True:
        try:
            return await op()
        except StoreUnavailable as exc:
            beats = _BEAT.get()
            if beats is not None:
                beats.beat()  # whatever this attempt knows reaches the next one
            if time.monotonic() + pause > deadline:
                raise
            _log.warning("journal database unavailable, retrying in %.1fs: %s", pause, exc)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)
