"""Approval requests awaiting a human decision: mutable working state that survives a restart.

The evidence of what was proposed and decided is the journal; a row here only lets a resumed
saga check that the input it is about to run is the input that was approved (``input_hash``).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass
from datetime import datetime
from typing import Any

# input_hash lives in the journal core (pure); re-exported here beside the column it fills.
from sagacity.journal import input_hash, utc_micros
from sagacity.store.db import Pool, naive_utc, translate_errors

__all__ = ["ApprovalRequest", "ApprovalStore", "input_hash"]

_COLUMNS = "saga_id, journal_seq, tool_name, input, input_hash, created_at"


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for approval; ``journal_seq`` is its AWAITING_APPROVAL row."""

    saga_id: str
    journal_seq: int
    tool_name: str
    input: str
    input_hash: str
    created_at: datetime  # aware UTC when read back


class ApprovalStore:
    """Reads and writes ``sagacity_approval_request``."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def put(self, req: ApprovalRequest) -> None:
        """Store ``req``; a request already there for the same saga and seq is replaced."""
        with translate_errors(f"store approval request {req.saga_id!r} seq {req.journal_seq}"):
            async with self._pool.connection() as conn:
                await conn.execute(
                    f"""
                    INSERT INTO sagacity_approval_request ({_COLUMNS})
                    VALUES (%s, %s, %s, %s, %s, %s)
                    ON CONFLICT (saga_id, journal_seq) DO UPDATE SET
                        tool_name = EXCLUDED.tool_name,
                        input = EXCLUDED.input,
                        input_hash = EXCLUDED.input_hash,
                        created_at = EXCLUDED.created_at
                    """,
                    (
                        req.saga_id,
                        req.journal_seq,
                        req.tool_name,
                        req.input,
                        req.input_hash,
                        naive_utc(req.created_at),
                    ),
                )

    async def get(self, saga_id: str, journal_seq: int) -> ApprovalRequest | None:
        """The pending request for that saga and seq, or None."""
        with translate_errors(f"read approval request {saga_id!r} seq {journal_seq}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    f"SELECT {_COLUMNS} FROM sagacity_approval_request"
                    " WHERE saga_id = %s AND journal_seq = %s",
                    (saga_id, journal_seq),
                )
                row = await cur.fetchone()
        return None if row is None else _request(row)

    async def list(self, *, saga_id: str | None = None) -> builtins.list[ApprovalRequest]:
        """Pending requests, oldest first; only ``saga_id``'s when given."""
        with translate_errors("list approval requests"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    f"SELECT {_COLUMNS} FROM sagacity_approval_request"
                    " WHERE %(saga_id)s::text IS NULL OR saga_id = %(saga_id)s"
                    " ORDER BY created_at, saga_id, journal_seq",
                    {"saga_id": saga_id},
                )
                return [_request(row) for row in await cur.fetchall()]

    async def delete(self, saga_id: str, journal_seq: int) -> bool:
        """Remove the request once decided; False when there was none."""
        with translate_errors(f"delete approval request {saga_id!r} seq {journal_seq}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    "DELETE FROM sagacity_approval_request WHERE saga_id = %s AND journal_seq = %s",
                    (saga_id, journal_seq),
                )
                return cur.rowcount == 1


def _request(row: tuple[Any, ...]) -> ApprovalRequest:
    saga_id, journal_seq, tool_name, input_, hash_, created_at = row
    return ApprovalRequest(saga_id, journal_seq, tool_name, input_, hash_, utc_micros(created_at))
