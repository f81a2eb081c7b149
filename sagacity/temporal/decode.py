"""Reading a signal's or update's raw payloads in workflow code: what cannot be read is a reason.

The saga's handlers take their payloads raw (:class:`~temporalio.common.RawValue`), so Temporal's
data converter does not run before them: had it failed (JSON nested thousands deep, a lone
surrogate, bytes that are not UTF-8, an encoding it does not know, a payload the codec could not
open), the SDK would drop a signal with a line in the worker's log and answer an update with a
retryable ``RuntimeError``. Here the same converter decodes each payload, and any failure becomes
a sentence the saga records in ``refused_decisions`` and a refused update's caller reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from temporalio import workflow
from temporalio.common import RawValue

__all__ = ["Unreadable", "encodable", "read"]

#: how much of a reason a refusal keeps
_REASON_CHARS = 300


@dataclass(frozen=True)
class Unreadable:
    """Payloads the data converter cannot decode, and why."""

    why: str


def read(raws: Sequence[RawValue]) -> list[Any] | Unreadable:
    """Each payload decoded as the data converter would (no type hint), or why one cannot be.

    The payload converter is the workflow's, so what decodes here decodes exactly as it did when
    the SDK decoded it before the handler (recorded histories replay the same values).
    """
    converter = workflow.payload_converter()
    values: list[Any] = []
    for index, raw in enumerate(raws):
        try:
            values.append(converter.from_payload(raw.payload))
        # a payload from outside may fail any way the converter can: an unknown encoding
        # (KeyError), bad JSON or UTF-8 (ValueError), nesting too deep (RecursionError, a
        # RuntimeError), the codec's unreadable marker (a SagacityError); the handler must not
        # raise, or the saga's workflow task fails on every attempt
        except Exception as exc:
            encoding = raw.payload.metadata.get("encoding", b"").decode(errors="replace")[:40]
            return Unreadable(
                f"payload {index + 1} ({encoding or 'no encoding'}) cannot be decoded: {_why(exc)}"
            )
    return values


def encodable(text: str) -> str:
    """``text`` as UTF-8 can carry it: lone surrogates written as ``\\udXXX`` escapes."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _why(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        # pydantic's own text quotes the input: its error messages alone say what is wrong
        why = "; ".join(str(e["msg"]) for e in exc.errors())
    elif isinstance(exc, RecursionError):
        why = "nested too deeply to read"
    else:
        why = str(exc) or type(exc).__name__
    return encodable(why)[:_REASON_CHARS]
