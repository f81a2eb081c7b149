"""Approval requests awaiting a human decision: mutable working state that survives a restart.

The evidence of what was proposed and decided is the journal; a row here only lets a resumed
saga check that the input it is about to run is the input that was approved (``input_hash``).
"""

from __future__ import annotations

import builtins
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

from psycopg import sql

# input_hash lives in the journal core (pure); re-exported here beside the column it fills.
from sagacity.journal import input_hash, utc_micros
from sagacity.store.db import Pool, naive_utc, translate_errors
from sagacity.store.placement import pool_schema, qualify

__all__ = ["ApprovalRequest", "ApprovalStore", "InboxCounts", "InboxFilter", "input_hash"]

_COLUMNS = "saga_id, journal_seq, tool_name, input, input_hash, created_at, expires_at"
#: what a read returns: the request and its escalation (``schema/0010_approval_escalation.sql``)
_READ = (
    f"{_COLUMNS}, escalated_at, escalated_to, escalation_state, escalation_attempts,"
    " escalation_error"
)
_TABLE = "sagacity_approval_request"

# Templates: {table} is the table in the journal's schema (sagacity.store.placement).
_PUT = f"""
INSERT INTO {{sagacity_approval_request}} ({_COLUMNS})
VALUES (%s, %s, %s, %s, %s, %s, %s)
ON CONFLICT (saga_id, journal_seq) DO UPDATE SET
    tool_name = EXCLUDED.tool_name,
    input = EXCLUDED.input,
    input_hash = EXCLUDED.input_hash,
    created_at = EXCLUDED.created_at,
    expires_at = EXCLUDED.expires_at
"""
_GET = f"SELECT {_READ} FROM {{sagacity_approval_request}} WHERE saga_id = %s AND journal_seq = %s"
_LIST = (
    f"SELECT {_READ} FROM {{sagacity_approval_request}}"
    " WHERE %(saga_id)s::text IS NULL OR saga_id = %(saga_id)s"
    " ORDER BY created_at, saga_id, journal_seq"
)
_DELETE = "DELETE FROM {sagacity_approval_request} WHERE saga_id = %s AND journal_seq = %s"
# One attempt at a time may post: the first, or one after an attempt that failed visibly. An
# attempt that finds another's POST in flight (a worker that stopped mid-POST, or one still
# posting) takes it as unknown and does not post again.
_CLAIM = """
UPDATE {sagacity_approval_request} SET
    escalated_at = COALESCE(escalated_at, %s),
    escalated_to = %s,
    escalation_state = 'posting',
    escalation_attempts = escalation_attempts + 1
WHERE saga_id = %s AND journal_seq = %s
  AND (escalation_state IS NULL OR escalation_state = 'failed')
RETURNING escalation_attempts
"""
_IN_FLIGHT = """
UPDATE {sagacity_approval_request} SET escalation_state = 'unknown', escalation_error = %s
WHERE saga_id = %s AND journal_seq = %s AND escalation_state = 'posting'
"""
_STATE = (
    "SELECT escalation_state FROM {sagacity_approval_request}"
    " WHERE saga_id = %s AND journal_seq = %s"
)
# the attempt that claimed says how its POST went (a later one may have taken it as unknown)
_FINISH = """
UPDATE {sagacity_approval_request} SET escalation_state = %s, escalation_error = %s
WHERE saga_id = %s AND journal_seq = %s AND escalation_attempts = %s
  AND escalation_state IN ('posting', 'unknown')
"""


@dataclass(frozen=True, slots=True)
class ApprovalRequest:
    """A call waiting for approval; ``journal_seq`` is its AWAITING_APPROVAL row."""

    saga_id: str
    journal_seq: int
    tool_name: str
    input: str
    input_hash: str
    created_at: datetime  # aware UTC when read back
    #: when the saga rejects the call as timed out; None: it waits until decided
    expires_at: datetime | None = None
    #: when the saga escalated the request past its SLA (None: not escalated)
    escalated_at: datetime | None = None
    #: where the escalation went: the webhook's scheme and host ("" when none is configured)
    escalated_to: str | None = None
    #: posting, sent, failed (to be tried again), unknown (a POST's end unseen), recorded
    escalation_state: str | None = None
    escalation_attempts: int = 0
    #: the last attempt's failure, as the worker saw it
    escalation_error: str | None = None

    @property
    def cursor(self) -> tuple[datetime, str, int]:
        """Where this request sits in the inbox's order: pass it as ``InboxFilter.after``."""
        return (self.created_at, self.saga_id, self.journal_seq)


@dataclass(frozen=True, slots=True)
class InboxFilter:
    """Which waiting requests to list: every field narrows, None (or empty) leaves it open."""

    tool_names: tuple[str, ...] = ()
    saga_id: str | None = None
    #: requested at or before this time (an age of at least ``now - requested_before``)
    requested_before: datetime | None = None
    #: requested at or after this time
    requested_after: datetime | None = None


@dataclass(frozen=True, slots=True)
class InboxCounts:
    """How many requests a filter matches, and how many per tool (the tool filter left open)."""

    total: int
    by_tool: dict[str, int] = field(default_factory=dict)


class ApprovalStore:
    """Reads and writes ``sagacity_approval_request``."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def put(self, req: ApprovalRequest) -> None:
        """Store ``req``; a request already there for the same saga and seq is replaced."""
        with translate_errors(f"store approval request {req.saga_id!r} seq {req.journal_seq}"):
            async with self._pool.connection() as conn:
                await conn.execute(
                    qualify(_PUT, await pool_schema(self._pool, conn)),
                    (
                        req.saga_id,
                        req.journal_seq,
                        req.tool_name,
                        req.input,
                        req.input_hash,
                        naive_utc(req.created_at),
                        None if req.expires_at is None else naive_utc(req.expires_at),
                    ),
                )

    async def get(self, saga_id: str, journal_seq: int) -> ApprovalRequest | None:
        """The pending request for that saga and seq, or None."""
        with translate_errors(f"read approval request {saga_id!r} seq {journal_seq}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_GET, await pool_schema(self._pool, conn)), (saga_id, journal_seq)
                )
                row = await cur.fetchone()
        return None if row is None else _request(row)

    async def list(self, *, saga_id: str | None = None) -> builtins.list[ApprovalRequest]:
        """Pending requests, oldest first; only ``saga_id``'s when given."""
        with translate_errors("list approval requests"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_LIST, await pool_schema(self._pool, conn)), {"saga_id": saga_id}
                )
                return [_request(row) for row in await cur.fetchall()]

    async def page(
        self,
        where: InboxFilter | None = None,
        *,
        after: tuple[datetime, str, int] | None = None,
        limit: int = 50,
    ) -> builtins.list[ApprovalRequest]:
        """Up to ``limit`` requests ``where`` matches, oldest first, from just after ``after``
        (a request's :attr:`~ApprovalRequest.cursor`): one index range scan, however many wait."""
        conditions, params = _conditions(where)
        if after is not None:
            conditions.append(sql.SQL("(created_at, saga_id, journal_seq) > (%s, %s, %s)"))
            params += [naive_utc(after[0]), after[1], after[2]]
        query = sql.SQL(
            "SELECT {columns} FROM {table} {where} ORDER BY created_at, saga_id, journal_seq LIMIT %s"
        )
        with translate_errors("list approval requests"):
            async with self._pool.connection() as conn:
                table = sql.Identifier(await pool_schema(self._pool, conn), _TABLE)
                cur = await conn.execute(
                    query.format(columns=sql.SQL(_READ), table=table, where=_where(conditions)),
                    [*params, limit],
                )
                return [_request(row) for row in await cur.fetchall()]

    async def counts(self, where: InboxFilter | None = None) -> InboxCounts:
        """How many requests ``where`` matches; per tool, how many it would match with any tool."""
        where = where or InboxFilter()
        conditions, params = _conditions(replace(where, tool_names=()))
        query = sql.SQL("SELECT tool_name, count(*) FROM {table} {where} GROUP BY tool_name")
        with translate_errors("count approval requests"):
            async with self._pool.connection() as conn:
                table = sql.Identifier(await pool_schema(self._pool, conn), _TABLE)
                cur = await conn.execute(
                    query.format(table=table, where=_where(conditions)), params
                )
                by_tool = {str(tool): int(n) for tool, n in await cur.fetchall()}
        chosen = where.tool_names or tuple(by_tool)
        return InboxCounts(sum(by_tool.get(t, 0) for t in set(chosen)), by_tool)

    async def claim_escalation(
        self, saga_id: str, journal_seq: int, *, at: datetime, to: str
    ) -> int | str:
        """Claim the request's escalation for this attempt: its number when it may post, else
        the state that keeps it from posting (``sent``, ``recorded``, ``unknown``; ``gone``: the
        request was decided and removed). A POST found in flight becomes ``unknown``."""
        key = (saga_id, journal_seq)
        with translate_errors(f"escalate approval request {saga_id!r} seq {journal_seq}"):
            async with self._pool.connection() as conn:
                schema = await pool_schema(self._pool, conn)
                cur = await conn.execute(qualify(_CLAIM, schema), (naive_utc(at), to, *key))
                row = await cur.fetchone()
                if row is not None:
                    return int(row[0])
                why = "an earlier attempt stopped while posting: not posted again"
                await conn.execute(qualify(_IN_FLIGHT, schema), (why, *key))
                cur = await conn.execute(qualify(_STATE, schema), key)
                state = await cur.fetchone()
        return "gone" if state is None else str(state[0])

    async def finish_escalation(
        self, saga_id: str, journal_seq: int, attempt: int, state: str, error: str | None = None
    ) -> None:
        """Record how escalation attempt ``attempt`` went: ``sent``, ``failed`` or ``recorded``."""
        with translate_errors(f"escalate approval request {saga_id!r} seq {journal_seq}"):
            async with self._pool.connection() as conn:
                await conn.execute(
                    qualify(_FINISH, await pool_schema(self._pool, conn)),
                    (state, error, saga_id, journal_seq, attempt),
                )

    async def delete(self, saga_id: str, journal_seq: int) -> bool:
        """Remove the request once decided; False when there was none."""
        with translate_errors(f"delete approval request {saga_id!r} seq {journal_seq}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_DELETE, await pool_schema(self._pool, conn)), (saga_id, journal_seq)
                )
                return cur.rowcount == 1


def _conditions(
    where: InboxFilter | None,
) -> tuple[builtins.list[sql.Composable], builtins.list[Any]]:
    conditions: builtins.list[sql.Composable] = []
    params: builtins.list[Any] = []
    if where is None:
        return conditions, params
    if where.tool_names:
        conditions.append(sql.SQL("tool_name = ANY(%s)"))
        params.append(list(where.tool_names))
    if where.saga_id is not None:
        conditions.append(sql.SQL("saga_id = %s"))
        params.append(where.saga_id)
    if where.requested_before is not None:
        conditions.append(sql.SQL("created_at <= %s"))
        params.append(naive_utc(where.requested_before))
    if where.requested_after is not None:
        conditions.append(sql.SQL("created_at >= %s"))
        params.append(naive_utc(where.requested_after))
    return conditions, params


def _where(conditions: builtins.list[sql.Composable]) -> sql.Composable:
    return sql.SQL("WHERE ") + sql.SQL(" AND ").join(conditions) if conditions else sql.SQL("")


def _request(row: tuple[Any, ...]) -> ApprovalRequest:
    saga_id, journal_seq, tool_name, input_, hash_, created_at, expires_at, *escalation = row
    escalated_at, escalated_to, state, attempts, error = escalation
    return ApprovalRequest(
        saga_id,
        journal_seq,
        tool_name,
        input_,
        hash_,
        utc_micros(created_at),
        None if expires_at is None else utc_micros(expires_at),
        None if escalated_at is None else utc_micros(escalated_at),
        escalated_to,
        state,
        int(attempts or 0),
        error,
    )
