"""Journal rows: a draft (what a caller wants to record) and a sealed entry (as stored)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from sagacity.errors import InvalidEntry
from sagacity.journal.phases import Phase


@dataclass(frozen=True, slots=True)
class Draft:
    """A row before it has a place in the chain: no seq, timestamp or hash yet."""

    saga_id: str
    tool_name: str
    phase: Phase
    input: str = ""
    payload: str = ""

    def __post_init__(self) -> None:
        check_draft(self)


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored journal row. ``timestamp`` is UTC with microsecond precision."""

    saga_id: str
    seq: int
    tool_name: str
    phase: Phase
    input: str
    payload: str
    timestamp: datetime
    hash: str

    def same_content(self, draft: Draft) -> bool:
        """True when this row records what ``draft`` asks to record (timestamp aside)."""
        return (
            self.saga_id == draft.saga_id
            and self.tool_name == draft.tool_name
            and self.phase == draft.phase
            and self.input == draft.input
            and self.payload == draft.payload
        )


def utc_micros(ts: datetime) -> datetime:
    """``ts`` as an aware UTC datetime; naive values are taken to be UTC already."""
    if ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts.astimezone(UTC)


def check_draft(draft: Draft) -> None:
    """Raise :class:`InvalidEntry` naming the field when ``draft`` cannot be journaled.

    NUL is refused rather than escaped: Postgres TEXT cannot hold it, and silently rewriting
    evidence would make the stored row differ from what the caller recorded. Tool data reaches
    the journal JSON-encoded, where NUL is already the escape ``\\u0000``.
    """
    if not draft.saga_id or not draft.saga_id.strip():
        raise InvalidEntry("saga_id must be a non-empty string")
    if not draft.tool_name:
        raise InvalidEntry(f"tool_name must be non-empty (saga {draft.saga_id!r})")
    try:
        Phase(draft.phase)
    except ValueError:
        allowed = ", ".join(p.value for p in Phase)
        raise InvalidEntry(f"phase {draft.phase!r} is not one of: {allowed}") from None
    for name in ("saga_id", "tool_name", "input", "payload"):
        text: str = getattr(draft, name)
        if "\x00" in text:
            raise InvalidEntry(
                f"{name} contains a NUL byte, which Postgres TEXT cannot store; "
                "JSON-encode the value (NUL becomes \\u0000)"
            )
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidEntry(
                f"{name} is not valid Unicode text (a lone surrogate?): {exc}"
            ) from None
    if draft.input:
        try:
            json.loads(draft.input)
        except ValueError as exc:
            raise InvalidEntry(f"input must be JSON text or empty: {exc}") from None
