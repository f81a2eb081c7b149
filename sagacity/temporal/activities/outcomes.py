"""A call's outcome as the workflow gets it, read from its journal rows."""

from __future__ import annotations

import json

from sagacity.journal import Entry, Phase
from sagacity.journal.results import read_result
from sagacity.temporal.models import CallOutcome, CallStatus, ErrorInfo, Journaled, RowRef

__all__ = ["MAX_RESULT_BYTES", "outcome_from_row", "ref"]


def ref(entry: Entry, *, sealed: bool = False) -> RowRef:
    return RowRef(
        seq=entry.seq, tool_name=entry.tool_name, phase=entry.phase, hash=entry.hash, sealed=sealed
    )


#: the most result a call hands its workflow, in JSON bytes: Temporal refuses an activity's
#: answer over 2 MiB (and would retry the call's activity for ever), and the answer may carry
#: the result twice (as returned and as journaled, when redaction changed it)
MAX_RESULT_BYTES = 512 * 1024


def _too_big(*texts: str) -> int | None:
    """The bytes ``texts`` (a result, and the call's journaled view when redaction changed it)
    take when that is too much to hand the workflow; None when they fit."""
    if sum(map(len, texts)) * 4 <= MAX_RESULT_BYTES:  # UTF-8 takes at most 4 bytes a character
        return None
    size = sum(len(text.encode()) for text in texts)
    return size if size > MAX_RESULT_BYTES else None


def outcome_from_row(
    intent_row: Entry,
    row: Entry,
    *,
    input_json: str | None = None,
    payload: str | None = None,
    sealed: bool = False,
) -> CallOutcome:
    """The call's outcome from its rows; ``payload``: the unredacted outcome, whose result the
    workflow gets; ``input_json``: the unredacted input. Where redaction changed either, the
    outcome also says how the journal holds the call (``journaled``). ``sealed``: the outcome
    row was sealed as the saga's end."""
    refs = [ref(intent_row), ref(row, sealed=sealed)]
    body = json.loads(row.payload) if row.payload else None
    executed = row.phase is Phase.EXECUTED
    journaled = None
    if (input_json is not None and intent_row.input != input_json) or (
        executed and payload is not None and row.payload != payload
    ):
        journaled = Journaled(
            input=json.loads(intent_row.input) if intent_row.input else {},
            result=body if executed else None,
        )
    if executed:
        shown_input = intent_row.input or ""
        view = () if journaled is None else (shown_input, row.payload or "")
        result_json = payload or row.payload or "null"
        size = _too_big(result_json, *view)
        if size is not None:
            # the call took effect: EXECUTED, but failed with a clear error instead of an
            # answer Temporal refuses; the saga compensates it with the journal's result
            if journaled is not None:
                # the journaled input too, when it alone would not fit beside the answer
                fits = len(shown_input) <= MAX_RESULT_BYTES
                journaled = Journaled(input=journaled.input if fits else {})
            return CallOutcome(
                status=CallStatus.EXECUTED,
                rows=refs,
                journaled=journaled,
                result_withheld=True,
                error=ErrorInfo(
                    type="ResultTooLarge",
                    message=f"{row.tool_name} returned {len(result_json.encode()):,} bytes of "
                    f"JSON ({size:,} with the call's redacted view), more than a saga hands its "
                    f"workflow ({MAX_RESULT_BYTES:,}); the call took effect (EXECUTED, "
                    "its result in the journal) and is compensated with that result. Return a "
                    "reference (an id, a URL) to big data instead",
                ),
            )
        # the result the worker wrote (``payload``) is real, but may be a resolution's or say
        # the journal never held it; the row's alone may also be redacted
        read = read_result(payload, journaled=False) if payload else read_result(row.payload)
        return CallOutcome(
            status=CallStatus.EXECUTED,
            result=read.value if read.available else read.shown,
            rows=refs,
            journaled=journaled,
            # no real result to undo with: the compensation asks the journal, which says why
            result_withheld=not read.available,
        )
    body = body if isinstance(body, dict) else {"message": row.payload}
    error = ErrorInfo(type=str(body.get("type", "Error")), message=str(body.get("message", "")))
    # rows written before the field existed: the spec's rule, a FAILED call's effect is unknown
    unknown = body.get("effect", "unknown") != "none"
    return CallOutcome(
        status=CallStatus.FAILED,
        error=error,
        rows=refs,
        effect_unknown=unknown,
        journaled=journaled,
    )
