"""An ``open_saga`` answer's rows: as many as fit one answer to the workflow."""

from __future__ import annotations

from sagacity.journal import Entry, Phase
from sagacity.temporal import limits
from sagacity.temporal.models import JournalRow

__all__ = ["page_of"]


#: room in an ``open_saga`` answer for the rest of it (the tool catalog, the keyring, the policy)
_PAGE_ROOM = 256 * 1024
#: what an ``open_saga`` answer's rows may take together: a big call's INTENT and outcome rows
#: may not fit in one (history refuses a larger answer, and the run would wedge reading them)
_PAGE_BYTES = limits.MAX_VALUE_BYTES - _PAGE_ROOM


def page_of(entries: list[Entry]) -> list[JournalRow]:
    """The first of ``entries`` that fit one answer to the workflow, at least one; an outcome row
    too large alone goes without its input (the workflow reads an INTENT's) and, if still too
    large, without its payload (``withheld``: the compensation reads it from the journal)."""
    page: list[JournalRow] = []
    used = 0
    for e in entries:
        row = JournalRow(
            seq=e.seq,
            tool_name=e.tool_name,
            phase=e.phase,
            hash=e.hash,
            input=e.input,
            payload=e.payload,
        )
        size = _row_bytes(row)
        if size > _PAGE_BYTES and e.phase in (Phase.EXECUTED, Phase.FAILED):
            row.input = ""
            size = _row_bytes(row)
            if size > _PAGE_BYTES:
                row.payload, row.withheld = "", True
                size = _row_bytes(row)
        if page and used + size > _PAGE_BYTES:
            break
        page.append(row)
        used += size
    return page


def _row_bytes(row: JournalRow) -> int:
    """The bytes ``row`` takes in an answer (its texts are escaped again in the answer's JSON)."""
    return len(row.model_dump_json().encode("utf-8", "surrogatepass"))
