"""Operator halts and quarantines (``sagacity_halt``) and the gate every INTENT checks.

A halt stops new side effects: a call's INTENT that it covers is never written (a trigger on
the journal checks the gate for every INTENT row, whatever statement writes it, see
``schema/0009_halt_trigger.sql``), and under the ``keep`` policy compensations wait too.
Halts are kept after they are lifted: who, why, when, signed, as an auditor reads them.
"""

from __future__ import annotations

import builtins
import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

import psycopg

from sagacity.errors import InvalidInput, StoreUnavailable
from sagacity.journal import utc_micros
from sagacity.store.db import Pool, translate_errors
from sagacity.store.placement import pool_schema, qualify

__all__ = ["Halt", "HaltKind", "HaltNotFound", "HaltPolicy", "HaltScope", "HaltStore"]

HaltKind = Literal["halt", "quarantine"]
#: what happens to the executed effects of the sagas a halt stops: ``keep`` freezes them (and
#: compensations wait too), ``compensate`` undoes the REVERSIBLE and COMPENSATABLE ones
HaltPolicy = Literal["keep", "compensate"]

_COLUMNS = (
    "id, kind, scope, policy, reason, operator, halted_at, signature, report, "
    "lifted_at, lifted_by, lift_reason, lift_signature"
)

# Statement templates: {table} is the table (or function) in the journal's schema
# (sagacity.store.placement).

# The active halts, as the INTENT trigger matches them (schemas 0007, 0009). A key whose value is
# JSON null narrows nothing, as HaltScope.from_json reads it (the gate would otherwise match no
# call).
_FOLD = """
UPDATE {sagacity_halt_gate} SET halts = COALESCE((
    SELECT jsonb_agg(jsonb_strip_nulls(scope) || jsonb_build_object(
        'id', id, 'compensations', policy = 'compensate') ORDER BY id)
    FROM {sagacity_halt} WHERE lifted_at IS NULL), '[]')
WHERE id = 1
"""
_HALT = f"""
INSERT INTO {{sagacity_halt}} (kind, scope, policy, reason, operator, halted_at, signature)
VALUES (%s, %s, %s, %s, %s, clock_timestamp() AT TIME ZONE 'UTC', %s)
RETURNING {_COLUMNS}
"""
_LIFT = f"""
UPDATE {{sagacity_halt}} SET lifted_at = clock_timestamp() AT TIME ZONE 'UTC',
    lifted_by = %s, lift_reason = %s, lift_signature = %s
WHERE id = %s AND lifted_at IS NULL
RETURNING {_COLUMNS}
"""
_SET_REPORT = "UPDATE {sagacity_halt} SET report = %s WHERE id = %s"
_ENFORCED = (
    "SELECT (h ->> 'id')::bigint FROM {sagacity_halt_gate} AS g,"
    " jsonb_array_elements(g.halts) AS h WHERE g.id = 1"
)
# Whether the journal's INTENT trigger (schema 0009) is there and fires in ordinary sessions.
_TRIGGER_ON = (
    "SELECT EXISTS (SELECT FROM pg_catalog.pg_trigger WHERE tgrelid = %s::regclass"
    " AND tgname = 'sagacity_intent_gate' AND tgenabled IN ('O', 'A'))"
)
_GET = f"SELECT {_COLUMNS} FROM {{sagacity_halt}} WHERE id = %s"
_LIST = (
    f"SELECT {_COLUMNS} FROM {{sagacity_halt}}"
    " WHERE NOT %s OR lifted_at IS NULL ORDER BY id DESC LIMIT %s"
)
#: the gate's predicate (schema 0007): the id of a halt in force that holds a call (or, last
#: argument true, a compensation), NULL when none does
HALTED = "SELECT {sagacity_halted}(%s, %s, %s, %s)"
_GATE_ROW = (
    "INSERT INTO {sagacity_halt_gate} (id, halts) VALUES (1, '[]') ON CONFLICT (id) DO NOTHING"
)


class HaltNotFound(InvalidInput, LookupError):
    """No active halt has that id (it never existed, or it is lifted already)."""

    code = "halt_not_found"


@dataclass(frozen=True, slots=True)
class HaltScope:
    """What a halt covers: each field given narrows it; none given is every call everywhere."""

    tool: str | None = None
    task_queue: str | None = None
    sagas: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        for name, value in (("tool", self.tool), ("task queue", self.task_queue)):
            if value is not None and not _plain(value):
                raise InvalidInput(
                    f"a halt's {name} must be a plain non-empty name, with no space around it"
                )
        if self.sagas is not None and (not self.sagas or not all(_plain(s) for s in self.sagas)):
            raise InvalidInput("a halt's sagas must be one or more plain non-empty ids")

    def covers(self, saga_id: str, tool: str, task_queue: str) -> bool:
        """Whether a call of ``tool`` in ``saga_id`` by a ``task_queue`` worker is halted."""
        return (
            (self.tool is None or self.tool == tool)
            and (self.task_queue is None or self.task_queue == task_queue)
            and (self.sagas is None or saga_id in self.sagas)
        )

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.tool is not None:
            out["tool"] = self.tool
        if self.task_queue is not None:
            out["task_queue"] = self.task_queue
        if self.sagas is not None:
            out["sagas"] = list(self.sagas)
        return out

    @classmethod
    def from_json(cls, raw: dict[str, Any]) -> HaltScope:
        sagas = raw.get("sagas")
        return cls(
            tool=raw.get("tool"),
            task_queue=raw.get("task_queue"),
            sagas=tuple(sagas) if sagas is not None else None,
        )

    def describe(self) -> str:
        parts = [
            *([f"tool {self.tool}"] if self.tool else []),
            *([f"task queue {self.task_queue}"] if self.task_queue else []),
            *([f"saga(s) {', '.join(self.sagas)}"] if self.sagas else []),
        ]
        return " and ".join(parts) or "every saga"


def _plain(value: str) -> bool:
    # no space around a name: the gate compares names byte for byte
    return bool(value) and value == value.strip() and value.isprintable() and len(value) <= 500


@dataclass(frozen=True, slots=True)
class Halt:
    """One halt or quarantine, active or lifted; times are aware UTC."""

    id: int
    kind: HaltKind
    scope: HaltScope
    policy: HaltPolicy
    reason: str
    operator: str
    halted_at: datetime
    #: the signed statement's signature (a ``Signature`` as JSON), None: unsigned
    signature: dict[str, Any] | None = None
    #: the blast radius at halt time (live effects), with its own signature
    report: dict[str, Any] | None = None
    lifted_at: datetime | None = None
    lifted_by: str | None = None
    lift_reason: str | None = None
    lift_signature: dict[str, Any] | None = field(default=None)

    @property
    def active(self) -> bool:
        return self.lifted_at is None


class HaltStore:
    """Writes halts as an operator (the tables' owner) and reads them as anyone."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def halt(
        self,
        *,
        kind: HaltKind,
        scope: HaltScope,
        policy: HaltPolicy,
        reason: str,
        operator: str,
        signature: dict[str, Any] | None,
    ) -> Halt:
        """Record a halt and close the gate: once this returns, no INTENT it covers is written.

        The gate row is locked first, so every INTENT insert in flight commits before the
        halt's time is taken, and every later one sees the halt.
        """
        if kind == "quarantine" and (scope.sagas is None or len(scope.sagas) != 1):
            raise InvalidInput("a quarantine names exactly one saga")
        with _writing("record a halt"):
            async with self._pool.connection() as conn, conn.transaction():
                schema = await pool_schema(self._pool, conn)
                await _lock_gate(conn, schema)
                cur = await conn.execute(
                    qualify(_HALT, schema),
                    (
                        kind,
                        json.dumps(scope.as_json()),
                        policy,
                        reason,
                        operator,
                        _json_or_none(signature),
                    ),
                )
                row = await cur.fetchone()
                await conn.execute(qualify(_FOLD, schema))
        assert row is not None
        return _halt(row)

    async def lift(
        self, halt_id: int, *, by: str, reason: str, signature: dict[str, Any] | None
    ) -> Halt:
        """Lift an active halt (:class:`HaltNotFound` if there is none with that id)."""
        with _writing(f"lift halt {halt_id}"):
            async with self._pool.connection() as conn, conn.transaction():
                schema = await pool_schema(self._pool, conn)
                await _lock_gate(conn, schema)
                cur = await conn.execute(
                    qualify(_LIFT, schema), (by, reason, _json_or_none(signature), halt_id)
                )
                row = await cur.fetchone()
                if row is None:
                    raise HaltNotFound(f"no active halt {halt_id} (see `sagacity halt list`)")
                await conn.execute(qualify(_FOLD, schema))
        return _halt(row)

    async def set_report(self, halt_id: int, report: dict[str, Any]) -> None:
        """Attach the halt report (the blast radius, signed) to halt ``halt_id``."""
        with _writing(f"store the report of halt {halt_id}"):
            async with self._pool.connection() as conn:
                await conn.execute(
                    qualify(_SET_REPORT, await pool_schema(self._pool, conn)),
                    (json.dumps(report), halt_id),
                )

    async def enforced(self) -> set[int]:
        """The ids of the halts the gate row holds: those every INTENT is checked against."""
        with translate_errors("read the halt gate"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(qualify(_ENFORCED, await pool_schema(self._pool, conn)))
                return {int(row[0]) for row in await cur.fetchall() if row[0] is not None}

    async def gate_on(self) -> bool:
        """Whether the journal's INTENT trigger is there and enabled: without it no INTENT is
        checked against the halts at all (the table's owner can disable it)."""
        with translate_errors("read the journal's triggers"):
            async with self._pool.connection() as conn:
                journal = qualify("{side_effect_journal}", await pool_schema(self._pool, conn))
                cur = await conn.execute(_TRIGGER_ON, (journal,))
                row = await cur.fetchone()
        return bool(row and row[0])

    async def get(self, halt_id: int) -> Halt | None:
        with translate_errors(f"read halt {halt_id}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_GET, await pool_schema(self._pool, conn)), (halt_id,)
                )
                row = await cur.fetchone()
        return None if row is None else _halt(row)

    async def list(self, *, active: bool = False, limit: int = 100) -> builtins.list[Halt]:
        """Halts, newest first; only those not lifted with ``active``."""
        with translate_errors("list halts"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_LIST, await pool_schema(self._pool, conn)), (active, limit)
                )
                return [_halt(row) for row in await cur.fetchall()]

    async def covering(self, saga_id: str, tool: str, task_queue: str) -> Halt | None:
        """An active halt that covers a call of ``tool`` in ``saga_id`` (the journal's trigger
        checks the same as it writes an INTENT: this is for a call whose INTENT is written)."""
        return await self._first(saga_id, tool, task_queue, compensation=False)

    async def holding(self, saga_id: str, tool: str, task_queue: str) -> Halt | None:
        """An active halt that makes a compensation of ``tool`` in ``saga_id`` wait."""
        return await self._first(saga_id, tool, task_queue, compensation=True)

    async def _first(
        self, saga_id: str, tool: str, task_queue: str, *, compensation: bool
    ) -> Halt | None:
        # the gate's own predicate (schema 0007), not a second reading of the halts in Python
        with translate_errors(f"check the halts for saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(HALTED, await pool_schema(self._pool, conn)),
                    (saga_id, tool, task_queue, compensation),
                )
                row = await cur.fetchone()
        return None if row is None or row[0] is None else await self.get(int(row[0]))


#: the gate's advisory lock (schema 0007's ``sagacity_halted`` takes it shared with each INTENT)
GATE_LOCK = (0x5A6C, 1)
#: how long a halt waits for the gate: INTENTs hold it for one statement each, so only a
#: session that keeps it (a stuck or hostile transaction) makes a halt wait longer
GATE_LOCK_TIMEOUT_S = 5


async def _lock_gate(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Take the gate for a halt or a lift, its row recreated first if it is gone (without it
    the INTENT check finds no row and refuses nothing); name the sessions holding it if it
    stays taken."""
    await conn.execute(f"SET LOCAL lock_timeout = '{GATE_LOCK_TIMEOUT_S}s'")
    await conn.execute(qualify(_GATE_ROW, schema))
    try:
        async with conn.transaction():  # a savepoint: the blockers are read after a timeout
            await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s, %s)", GATE_LOCK)
    except psycopg.errors.LockNotAvailable:
        cur = await conn.execute(
            "SELECT a.pid, a.usename, a.state, a.xact_start FROM pg_locks AS l"
            " JOIN pg_stat_activity AS a USING (pid)"
            " WHERE l.locktype = 'advisory' AND l.classid = %s AND l.objid = %s AND l.granted"
            " AND a.pid <> pg_backend_pid() ORDER BY a.xact_start",
            GATE_LOCK,
        )
        holders = "; ".join(
            f"pid {pid} ({user}, {state}, in a transaction since {since})"
            for pid, user, state, since in await cur.fetchall()
        )
        raise StoreUnavailable(
            f"the halt gate stayed locked for {GATE_LOCK_TIMEOUT_S} s, so nothing was written; "
            f"sessions holding it: {holders or 'none any more'}. End them "
            "(pg_terminate_backend) and try again"
        ) from None


@contextmanager
def _writing(action: str) -> Iterator[None]:
    """:func:`translate_errors`, saying whose login writes halts when this one may not."""
    try:
        with translate_errors(action):
            yield
    except StoreUnavailable as exc:
        if isinstance(exc.__cause__, psycopg.errors.InsufficientPrivilege):
            raise StoreUnavailable(
                f"{action}: this login may not write halts (workers only read them); an "
                "operator writes them as the tables' owner: set SAGACITY_OWNER_DATABASE_URL"
            ) from exc
        raise


def _json_or_none(value: dict[str, Any] | None) -> str | None:
    return None if value is None else json.dumps(value)


def _halt(row: tuple[Any, ...]) -> Halt:
    return Halt(
        id=int(row[0]),
        kind=row[1],
        scope=HaltScope.from_json(row[2]),
        policy=row[3],
        reason=row[4],
        operator=row[5],
        halted_at=utc_micros(row[6]),
        signature=row[7],
        report=row[8],
        lifted_at=None if row[9] is None else utc_micros(row[9]),
        lifted_by=row[10],
        lift_reason=row[11],
        lift_signature=row[12],
    )
