"""Checks on input from outside (files, command-line arguments, HTTP bodies) before it is used.

Whatever enters here ends up in a Temporal payload, a workflow's memory and a Postgres row, none
of which can hold everything JSON text can say. Refused, each with an :class:`InvalidInput`
naming what and where:

* text that is not UTF-8;
* malformed JSON (with line and column), and ``NaN``/``Infinity``, which are not JSON;
* nesting deeper than :data:`MAX_DEPTH` (a workflow walks values recursively);
* lone surrogates (``"\\ud800"``): valid JSON escapes, but not Unicode text, so they cannot be
  encoded for Temporal or Postgres;
* in names (tools, steps, people): empty, control characters (NUL included), over
  :data:`NAME_MAX` characters.

NUL inside JSON *values* is kept: the journal stores it escaped (``\\u0000``).
"""

from __future__ import annotations

import json
import math
import unicodedata
from typing import Any

from pydantic import ValidationError

from sagacity.errors import InvalidInput

__all__ = [
    "MAX_DEPTH",
    "NAME_MAX",
    "NAME_PATTERN",
    "check_json",
    "check_name",
    "check_text",
    "invalid",
    "load_json",
    "load_object",
]

#: how deeply arrays and objects may nest in JSON from outside
MAX_DEPTH = 100
#: longest name (tool, step id, resolver) accepted, in characters
NAME_MAX = 200
#: the names :func:`check_name` accepts, length aside, as a JSON Schema ``pattern`` (ECMA-262,
#: read the same by Python's ``re``): no control character (Unicode category Cc), and one
#: character at least that is neither a control nor whitespace (``str.isspace``)
NAME_PATTERN = (
    r"^[^\x00-\x1f\x7f-\x9f]*"
    r"[^\x00-\x20\x7f-\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]"
    r"[^\x00-\x1f\x7f-\x9f]*$"
)


def load_json(data: bytes | str, *, what: str, max_depth: int = MAX_DEPTH) -> Any:
    """Parse JSON text from outside, then :func:`check_json` it."""
    if isinstance(data, bytes):
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(
                f"{what}: not UTF-8 text (byte {data[exc.start]:#04x} at offset {exc.start})"
            ) from None
    else:
        text = data
    try:
        value = json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InvalidInput(
            f"{what}: not valid JSON: {exc.msg} (line {exc.lineno}, column {exc.colno})"
        ) from None
    except RecursionError:
        raise InvalidInput(f"{what}: nested deeper than {max_depth} levels") from None
    except ValueError as exc:  # NaN/Infinity (below), or an integer of thousands of digits
        reason = "a number has too many digits" if "digits" in str(exc) else str(exc)
        raise InvalidInput(f"{what}: not valid JSON: {reason}") from None
    check_json(value, what=what, max_depth=max_depth)
    return value


def load_object(data: bytes | str, *, what: str) -> dict[str, Any]:
    """:func:`load_json` of text that must be one JSON object (a tool's arguments by name)."""
    value = load_json(data, what=what)
    if not isinstance(value, dict):
        raise InvalidInput(f"{what}: must be a JSON object, not {type(value).__name__}")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


def check_json(value: Any, *, what: str, max_depth: int = MAX_DEPTH) -> None:
    """Refuse ``value`` (parsed JSON) if it nests too deeply or holds what cannot be sent on.

    Walks without recursion, so a value nested thousands deep is refused, not a crash.
    """
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if len(path) > max_depth:
            raise InvalidInput(f"{what}: nested deeper than {max_depth} levels")
        if isinstance(item, str):
            _unicode(item, what, path)
        elif isinstance(item, float) and not math.isfinite(item):
            raise InvalidInput(_at(what, path, f"{item} is not a JSON number"))
        elif isinstance(item, dict):
            for key, child in item.items():
                if not isinstance(key, str):
                    raise InvalidInput(_at(what, path, f"key {key!r} is not a string"))
                _unicode(key, what, path)
                stack.append((child, (*path, key)))
        elif isinstance(item, list | tuple):
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
        elif item is not None and not isinstance(item, bool | int | float):
            raise InvalidInput(_at(what, path, f"{type(item).__name__} is not JSON data"))


def check_text(value: str, *, what: str, max_len: int | None = None) -> str:
    """``value`` if it is Unicode text without NUL (and at most ``max_len`` characters)."""
    _unicode(value, what, ())
    if "\x00" in value:
        raise InvalidInput(f"{what} contains a NUL character")
    if max_len is not None and len(value) > max_len:
        raise InvalidInput(f"{what} is {len(value):,} characters long; at most {max_len} allowed")
    return value


def check_name(value: str, *, what: str, max_len: int = NAME_MAX) -> str:
    """``value`` if it is a usable name: not blank, no control characters, not too long."""
    check_text(value, what=what, max_len=max_len)
    if not value.strip():
        raise InvalidInput(f"{what} is empty")
    control = next((c for c in value if unicodedata.category(c) == "Cc"), None)
    if control is not None:
        raise InvalidInput(f"{what} '{_clip(value)}' contains the control character {control!r}")
    return value


def invalid(exc: ValidationError, *, what: str) -> InvalidInput:
    """A pydantic refusal as one line: ``what: field: message; field: message``."""
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
    )
    return InvalidInput(f"{what}: {_clip(problems, 1000)}")


def _unicode(text: str, what: str, path: tuple[str | int, ...]) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = text[exc.start : exc.end]
        raise InvalidInput(
            _at(what, path, f"{bad!r} is a lone surrogate, not Unicode text")
        ) from None


def _at(what: str, path: tuple[str | int, ...], detail: str) -> str:
    if not path:
        return f"{what}: {detail}"
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{_clip(p)}" for p in path)
    return f"{what}, at {where.lstrip('.')}: {detail}"


def _clip(text: str, width: int = 40) -> str:
    """``text`` shortened, with what cannot be printed (controls, surrogates) escaped."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text[:width])
    return text if len(text) <= width else text[: width - 1] + "…"
