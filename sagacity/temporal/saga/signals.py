"""How the saga reads the signals sent to it: decoded, validated, dispatched, refusals recorded.

A bad signal is never raised: a raising handler would fail every workflow task and wedge the
saga. It is refused instead, and the refusal recorded where the status query shows it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar, get_type_hints

from pydantic import BaseModel, ValidationError
from temporalio import workflow
from temporalio.common import RawValue

from sagacity.temporal import decode
from sagacity.temporal.models import SagaCarry

M = TypeVar("M", bound=BaseModel)
F = TypeVar("F", bound=Callable[..., Any])


def hinted(fn: F) -> F:
    """``fn``, a handler the saga registers at run time, with its annotations evaluated once.

    The SDK reads a handler's type hints each time a saga registers it; read from the string
    annotations of this package's modules (``from __future__ import annotations``), each read
    compiles them again, some 50 µs a handler and saga."""
    fn.__annotations__ = get_type_hints(fn)
    return fn


def validated(model: type[M], payloads: tuple[Any, ...]) -> M | str:
    """A signal's or update's one payload as ``model``, or what is wrong with it."""
    if len(payloads) != 1:
        return f"{len(payloads)} arguments, not 1"
    try:
        return model.model_validate(payloads[0])
    except ValidationError as exc:
        return problems(exc)


def sender(payloads: tuple[Any, ...]) -> str:
    """Who a decision's payload names as its sender, when it names one legibly; else ``?``."""
    fields = payloads[0] if len(payloads) == 1 and isinstance(payloads[0], dict) else {}
    who = fields.get("approver") or fields.get("resolver") or fields.get("by")
    return who[:200] if isinstance(who, str) and who.isprintable() else "?"


def problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(payload)'}: {e['msg']}" for e in exc.errors()
    )


class Refusals:
    """The decisions and signals the saga refused, as ``refused_decisions`` shows them."""

    def __init__(self, saga_id: str, carry: SagaCarry | None) -> None:
        self._saga_id = saga_id
        self.refused: list[str] = list(carry.refused) if carry else []

    def refuse(self, who: str, why: str) -> None:
        # a signal (or an update the validator let through) is in history, so this note
        # survives replay; a signal's sender is not told. Kept as UTF-8 can carry it: the status
        # query that shows it must encode
        self.refused.append(decode.encodable(f"{who}: {why}"))
        workflow.logger.warning("saga %s refused a decision: %s", self._saga_id, why)

    def parse(self, signal: str, model: type[M], payloads: tuple[Any, ...]) -> M | None:
        """A signal's one payload, validated strictly; a bad one is refused and recorded."""
        parsed = validated(model, payloads)
        if isinstance(parsed, str):
            self.refuse(sender(payloads), f"malformed {signal!r} signal: {parsed}"[:1000])
            return None
        return parsed


class Signals:
    """The workflow's dynamic signal handler: the saga's signals by name, each to its part."""

    def __init__(self, refusals: Refusals, handlers: dict[str, Callable[..., None]]) -> None:
        self._refusals = refusals
        self._handlers = handlers

    @hinted
    def on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal the workflow has no handler of its own for: the saga's are decoded here,
        so one the data converter cannot read is refused and recorded like any bad decision;
        so is a signal of another name (a misspelt decision is not lost in silence)."""
        # Temporal reads this method's annotations (Sequence[RawValue]: the payloads come raw),
        # so both names are imported at run time
        handler = self._handlers.get(name)
        if handler is None:
            self._refusals.refuse("?", f"unknown signal {name[:100]!r}")
            return
        payloads = decode.read(args)
        if isinstance(payloads, decode.Unreadable):
            self._refusals.refuse("?", f"malformed {name!r} signal: {payloads.why}")
            return
        handler(*payloads)
