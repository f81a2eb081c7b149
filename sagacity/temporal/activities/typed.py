"""How an error leaves an activity: at once and typed when no retry can fix it, and scrubbed of
secrets before Temporal's history and logs see it."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, ParamSpec, TypeVar

from temporalio import activity
from temporalio.exceptions import ApplicationError

from sagacity.errors import (
    InvalidEntry,
    SagacityError,
    SagaIdTaken,
    SeqConflict,
    SuspectCall,
    ToolArgumentsInvalid,
    UnknownTool,
)
from sagacity.evidence.redaction import Redactor
from sagacity.temporal.activities.heartbeat import heartbeating

__all__ = ["FINAL", "non_retryable", "scrubbed", "typed"]

P = ParamSpec("P")
T = TypeVar("T")

#: errors no retry can fix: the activity fails at once, typed, and the workflow decides
FINAL = (InvalidEntry, SeqConflict, SagaIdTaken, UnknownTool, ToolArgumentsInvalid, SuspectCall)

#: the error types a saga takes for Sagacity's own verdicts (``saga.py``: a halt's refusal, a
#: SUSPECT call, a journal ahead of it); a tool's or a compensation's error never leaves the
#: activity under one of them, or a tool could hold its saga, or abort it in an operator's name
_RESERVED_TYPES = frozenset({"Halted", "SuspectCall", "JournalAhead", "SeqConflict", "SeqTaken"})


def non_retryable(exc: SagacityError, *details: Any) -> ApplicationError:
    return ApplicationError(str(exc), *details, type=type(exc).__name__, non_retryable=True)


def typed(fn: Callable[P, Awaitable[T]]) -> Callable[P, Awaitable[T]]:
    """Errors no retry can fix leave an activity at once, named by their type."""

    @functools.wraps(fn)
    async def run(*args: P.args, **kwargs: P.kwargs) -> T:
        try:
            if activity.info().is_local:
                return await fn(*args, **kwargs)
            # heartbeat from the start: an attempt waiting on the database is alive, and must
            # not be timed out into a second attempt that runs beside it
            async with heartbeating():
                return await fn(*args, **kwargs)
        except FINAL as exc:
            raise non_retryable(exc) from exc

    return run


def _tool_type(kind: str) -> str:
    return f"Tool{kind}" if kind in _RESERVED_TYPES else kind


def scrubbed(redactor: Redactor, tool_name: str, exc: Exception) -> ApplicationError:
    """``exc`` as it may leave the activity for Temporal's history and logs: its text
    scrubbed, its type (unless Sagacity's own, see ``_RESERVED_TYPES``) and retryability
    kept, its chain (unscrubbed text) dropped."""
    # an ApplicationError's str() starts with its type, which the new error carries anyway
    text = exc.message if isinstance(exc, ApplicationError) else str(exc)
    message = redactor.scrub(tool_name, text or type(exc).__name__)
    if isinstance(exc, ApplicationError):
        return ApplicationError(
            message,
            *redactor.scrub_value(tool_name, exc.details),
            type=_tool_type(exc.type or type(exc).__name__),
            non_retryable=exc.non_retryable,
            next_retry_delay=exc.next_retry_delay,
        )
    return ApplicationError(
        message, type=_tool_type(type(exc).__name__), non_retryable=isinstance(exc, FINAL)
    )
