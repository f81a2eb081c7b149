"""Which saga call a tool is running for, as the running tool can ask (idempotency keys, logs)."""

from __future__ import annotations

from contextvars import ContextVar, Token
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class CallInfo:
    """Which saga call a tool is running for (for idempotency keys or logs)."""

    saga_id: str
    seq: int
    attempt: int


_CALL: ContextVar[CallInfo | None] = ContextVar("sagacity_call", default=None)


def current_call() -> CallInfo:
    """The saga call the running tool belongs to; raises ``LookupError`` outside a saga."""
    info = _CALL.get()
    if info is None:
        raise LookupError("no saga call is running in this context")
    return info


def set_current_call(info: CallInfo) -> Token[CallInfo | None]:
    return _CALL.set(info)


def reset_current_call(token: Token[CallInfo | None]) -> None:
    _CALL.reset(token)
