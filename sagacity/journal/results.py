"""A call's result as its journal row holds it: the tool's real result, or why the row lacks it.

Every path that rebuilds a call's result from the journal (a compensation after continue-as-new
or of a result too big for the workflow, the rows another run wrote, reconcile's probes) reads
an EXECUTED row's payload through :func:`read_result`, which knows each shape a row takes:

* the tool's result as it returned it (also when a retry or a later run wrote or reads the row);
* a human's resolution of a SUSPECT call, ``{"$resolution": true, "resolved_by": …, "result":
  …}`` (with the fields of its signature when signed): the result is the one the human gave.
  Rows written before the reserved key existed hold ``{"resolved_by": …, "result": …}``: read
  as a resolution only when signed (a tool's result does not carry a signature over its own
  INTENT); unsigned, that shape is the tool's own result (:func:`resolution_payload`);
* a result the journal could not hold: ``{"unserializable_result": …, "error": …}`` (not JSON)
  or ``{"unjournalable_result": …}`` (refused by the database);
* a result with redacted fields, ``{"$redacted": …}`` markers in place of their values.

The last two do not hold the tool's real result: :attr:`JournaledResult.missing` says why, and
nothing built from them may stand in for it. A tool's own result shaped exactly like one of
the last two envelopes, or holding ``"$resolution": true`` beside ``resolved_by`` and
``result``, is read as the envelope: the row does not say which wrote it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sagacity.journal.canonical import parse_json, to_json

__all__ = [
    "MARKER",
    "RESOLUTION",
    "JournaledResult",
    "is_marker",
    "marker_paths",
    "read_input",
    "read_result",
    "resolution_payload",
]

#: The key of the object that replaces a redacted value.
MARKER = "$redacted"

#: The reserved key that marks a row as a human's resolution of a SUSPECT call.
RESOLUTION = "$resolution"

#: what a signed resolution's row holds beside ``resolved_by`` and ``result`` (``signed_row``)
_SIGNED = frozenset(
    ("by", "decision", "input_hash", "reason", "signer", "key_id", "signed_at", "signature")
)


@dataclass(frozen=True, slots=True)
class JournaledResult:
    """What an EXECUTED row holds of its call's result.

    ``value`` is the tool's real result (or, for a resolved SUSPECT call, the one the human
    gave) when ``missing`` is None; otherwise ``value`` is None and ``missing`` says why the row
    does not hold it. ``shown`` is the result as the journal shows it, markers and all: what a
    view may display, never what a compensation may be given.
    """

    value: Any = None
    missing: str | None = None
    shown: Any = None
    #: who resolved the SUSPECT call as happened, when the row records a resolution
    resolved_by: str | None = None

    @property
    def available(self) -> bool:
        return self.missing is None


def is_marker(value: Any) -> bool:
    """Whether ``value`` is a redaction marker, ``{"$redacted": …}``."""
    return isinstance(value, dict) and set(value) == {MARKER}


def marker_paths(value: Any) -> tuple[str, ...]:
    """Where redaction markers stand in JSON data (JSON Pointers), in document order."""
    paths: list[str] = []
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:  # iterative: a row may nest as deep as the JSON parser allowed
        node, at = stack.pop()
        if is_marker(node):
            paths.append(_pointer(at))
        elif isinstance(node, dict):
            stack.extend((item, (*at, key)) for key, item in reversed(node.items()))
        elif isinstance(node, list):
            stack.extend((item, (*at, i)) for i, item in reversed(list(enumerate(node))))
    return tuple(paths)


def resolution_payload(resolver: str, result: Any) -> str:
    """The payload of the EXECUTED row that records ``resolver``'s word that a SUSPECT call
    happened, with ``result``: marked by :data:`RESOLUTION`, so no tool's result reads as one."""
    return to_json({RESOLUTION: True, "resolved_by": resolver, "result": result})


def _resolution(body: Any, legacy: bool) -> bool:
    """Whether a parsed EXECUTED payload records a human's resolution (see the module doc;
    ``legacy``: the unsigned shape without the reserved key too, as readers before it took it)."""
    if not (isinstance(body, dict) and isinstance(body.get("resolved_by"), str)):
        return False
    if "result" not in body or set(body) - _SIGNED - {RESOLUTION} != {"resolved_by", "result"}:
        return False
    # before the reserved key: a signed row only (its signature fields are all there)
    signed = set(body) >= _SIGNED
    return body.get(RESOLUTION) is True or (RESOLUTION not in body and (legacy or signed))


def read_result(
    payload: str | None, *, journaled: bool = True, legacy: bool = False
) -> JournaledResult:
    """The result an EXECUTED row's ``payload`` holds, or why it holds none that is real.

    ``journaled=False``: ``payload`` is the outcome as the worker wrote it, before redaction,
    whose values are all real (a marker in it is the tool's own data). ``legacy``: read an
    unsigned ``{"resolved_by", "result"}`` as a resolution, as workflows recorded before the
    reserved key did (their replay must see what they saw).
    """
    if not payload:
        return JournaledResult()
    try:
        body = parse_json(payload)
    except ValueError as exc:
        return JournaledResult(missing=f"the journaled result is not JSON ({exc})", shown=payload)
    resolved_by = None
    if _resolution(body, legacy):
        resolved_by, body = body["resolved_by"], body["result"]
    elif isinstance(body, dict) and set(body) == {"unserializable_result", "error"}:
        return JournaledResult(
            missing=f"the tool returned a {body['unserializable_result']}, which cannot be "
            "journaled as JSON: the journal never held its result",
            shown=body,
        )
    elif isinstance(body, dict) and set(body) == {"unjournalable_result"}:
        return JournaledResult(
            missing="the database refused the tool's result: the journal never held it",
            shown=body,
        )
    hidden = marker_paths(body) if journaled else ()
    if hidden:
        return JournaledResult(
            missing=f"the journal holds the result redacted ({_hides('result', hidden)})",
            shown=body,
            resolved_by=resolved_by,
        )
    return JournaledResult(body, shown=body, resolved_by=resolved_by)


def read_input(input_json: str | None) -> JournaledResult:
    """A call's input as its INTENT row holds it (``{}`` when empty), or why it is not the real
    one (redacted fields)."""
    if not input_json:
        return JournaledResult({}, shown={})
    try:
        body = parse_json(input_json)
    except ValueError as exc:
        return JournaledResult(missing=f"the journaled input is not JSON ({exc})")
    hidden = marker_paths(body)
    if hidden:
        return JournaledResult(
            missing=f"the journal holds the input redacted ({_hides('input', hidden)})",
            shown=body,
        )
    return JournaledResult(body, shown=body)


def _hides(what: str, hidden: tuple[str, ...]) -> str:
    named = ", ".join(f"{what}{p}" for p in hidden[:5])
    more = f" and {len(hidden) - 5} more" if len(hidden) > 5 else ""
    return f"it hides {named}{more}, not their values"


def _pointer(parts: tuple[str | int, ...]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)
