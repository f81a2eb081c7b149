"""What a COMPENSATED row says of a correction: a COMPENSATABLE undo's result, journaled.

A REVERSIBLE undo restores the prior state; its COMPENSATED row's payload is empty. A
COMPENSATABLE one corrects instead (a correction email, a refund): the original effect stays
visible, so the row records that it was corrected and what the compensation returned, as
``{"corrected": <result>}``. The payload is hashed like any other (docs/hash-rules.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sagacity.journal.canonical import to_json

__all__ = ["Correction", "correction_payload", "read_correction"]

_KEY = "corrected"


@dataclass(frozen=True, slots=True)
class Correction:
    """A COMPENSATABLE effect's undo: corrected, not restored, and what the correction returned."""

    result: Any = None

    def describe(self) -> str:
        """``corrected, not restored`` and the correction's result, for a person."""
        if self.result is None:
            return "corrected, not restored"
        shown = json.dumps(self.result, ensure_ascii=False, sort_keys=True)
        return f"corrected, not restored: the correction returned {shown}"


def correction_payload(result: Any) -> str:
    """The COMPENSATED payload of a COMPENSATABLE undo that returned ``result`` (JSON data)."""
    return to_json({_KEY: result})


def read_correction(payload: str) -> Correction | None:
    """The correction a COMPENSATED row's payload records; None for a restoring undo's row."""
    if not payload:
        return None
    try:
        body = json.loads(payload)
    except ValueError:
        return None
    if not isinstance(body, dict) or _KEY not in body:
        return None
    return Correction(body[_KEY])
