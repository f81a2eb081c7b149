"""The journal table: appending sealed rows, reading them back, verifying stored chains."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from contextlib import (
    AbstractAsyncContextManager,
    aclosing,
    asynccontextmanager,
    contextmanager,
    nullcontext,
)
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any, Self, cast

import psycopg

from sagacity.errors import AppendContention, Halted, InvalidEntry, SeqConflict, SeqTaken
from sagacity.journal import (
    GENESIS_HASH,
    ChainVerifier,
    Draft,
    Entry,
    Phase,
    Verdict,
    seal,
    utc_micros,
)
from sagacity.store.db import Pool, naive_utc, open_pool, translate_errors
from sagacity.store.halts import HALTED
from sagacity.store.owners import SagaOwner, SagaOwners
from sagacity.store.placement import pool_schema, qualify
from sagacity.store.undo_locks import HeldLock, UndoLocks

_COLUMNS = "saga_id, seq, tool_name, phase, input, payload, timestamp, hash"

# Statement texts are templates: {table} names a table in the journal's schema (placement.py);
# in an f-string it is written {{table}}.
_SELECT_SAGA = f"SELECT {_COLUMNS} FROM {{side_effect_journal}} WHERE saga_id = %s ORDER BY seq"

# One statement checks the predecessor and inserts, so an append at a known seq costs one round
# trip. `prev` is the stored hash of row seq-1 (the genesis hash for seq 1, NULL when missing);
# the row goes in only when it matches the caller's prev_hash and seq is still free. It returns
# (inserted, the stored predecessor's hash). The journal's trigger refuses an INTENT a halt
# covers (schema 0009, SQLSTATE HALTED_SQLSTATE), waiting for a halt being written, then seeing
# it; `writer` tells it the task queue of the worker about to act on the row ('' names none).
#: a CTE's body telling the journal's trigger the task queue of the worker writing the row
WRITER = "SELECT pg_catalog.set_config('sagacity.task_queue', %(task_queue)s, true)"

#: a row's insert from :func:`insert_params`, as a CTE's body; ``FROM`` and ``WHERE`` follow
INSERT_ROW = f"""INSERT INTO {{side_effect_journal}} ({_COLUMNS})
    SELECT %(saga_id)s, %(seq)s, %(tool_name)s, %(phase)s, %(input)s, %(payload)s,
           %(timestamp)s, %(hash)s"""

_INSERT = f"""
WITH writer AS (
    {WRITER}
), prev AS (
    SELECT COALESCE(
        (SELECT hash FROM {{side_effect_journal}} WHERE saga_id = %(saga_id)s AND seq = %(seq)s - 1),
        CASE WHEN %(seq)s = 1 THEN %(genesis)s END
    ) AS hash
), ins AS (
    {INSERT_ROW}
    FROM prev, writer WHERE prev.hash = %(prev_hash)s
    ON CONFLICT (saga_id, seq) DO NOTHING
    RETURNING seq
)
SELECT EXISTS (SELECT FROM ins), prev.hash FROM prev
"""

#: the SQLSTATE the journal's trigger refuses an INTENT a halt covers with, the halt's id as its
#: DETAIL (schema 0009)
HALTED_SQLSTATE = "SGHLT"


_GET = f"SELECT {_COLUMNS} FROM {{side_effect_journal}} WHERE saga_id = %s AND seq = %s"
#: the row at (saga, seq) is the one hashed so (committed, as a later statement sees it)
_WRITTEN = "SELECT FROM {side_effect_journal} WHERE saga_id = %s AND seq = %s AND hash = %s"
_HEAD = (
    f"SELECT {_COLUMNS} FROM {{side_effect_journal}} WHERE saga_id = %s ORDER BY seq DESC LIMIT 1"
)
_AFTER = (
    f"SELECT {_COLUMNS} FROM {{side_effect_journal}} WHERE saga_id = %s AND seq > %s"
    " ORDER BY seq LIMIT %s"
)
# Each saga's rows in (after, last], for many sagas in one statement. A many-argument unnest in
# FROM is syntax (ROWS FROM of each array's pg_catalog.unnest), not a function a schema could
# shadow, so it is not qualified (it cannot be).
_SPANS = f"""
SELECT {", ".join(f"j.{c}" for c in _COLUMNS.split(", "))}
FROM unnest(%s::text[], %s::bigint[], %s::bigint[]) AS w(saga_id, after, last)
JOIN {{side_effect_journal}} j ON j.saga_id = w.saga_id AND j.seq > w.after AND j.seq <= w.last
ORDER BY j.saga_id, j.seq
"""
_SELECT_ALL = f"SELECT {_COLUMNS} FROM {{side_effect_journal}} ORDER BY saga_id, seq"
_NAMES_TOOL = "SELECT EXISTS (SELECT FROM {side_effect_journal} WHERE tool_name = %s)"

# Summaries of the sagas with any row in [since, until), most recently active first.
_LIST_SAGAS = """
WITH s AS (
    SELECT saga_id, count(*) AS rows, max(seq) AS head_seq,
           min(timestamp) AS first_at, max(timestamp) AS last_at
    FROM {side_effect_journal}
    GROUP BY saga_id
    HAVING bool_or((%(since)s::timestamp IS NULL OR timestamp >= %(since)s)
               AND (%(until)s::timestamp IS NULL OR timestamp < %(until)s))
    ORDER BY last_at DESC, saga_id
    LIMIT %(limit)s OFFSET %(offset)s
)
SELECT s.saga_id, s.rows, s.head_seq, j.hash, s.first_at, s.last_at, j.phase
FROM s JOIN {side_effect_journal} j ON j.saga_id = s.saga_id AND j.seq = s.head_seq
ORDER BY s.last_at DESC, s.saga_id
"""

# First key of the two-key advisory locks that queue appenders per saga (the second is the
# hash of the saga id); two-key locks never collide with single-key ones such as migrate's.
_APPEND_LOCK_SPACE = 0x5A6A

# Full-jitter exponential backoff between append attempts, in seconds.
_BACKOFF_BASE = 0.001
_BACKOFF_CAP = 0.05


@dataclass(frozen=True, slots=True)
class SagaSummary:
    """One saga as :meth:`JournalStore.list_sagas` reports it; ``head_*`` is its last row."""

    saga_id: str
    rows: int
    head_seq: int
    head_hash: str
    first_at: datetime
    last_at: datetime
    last_phase: Phase


class UndoClaim:
    """What :meth:`JournalStore.undo_claim` found: whether this attempt holds the undo lock
    (``mine``), the row already written where its COMPENSATED row goes (``written``) and the
    halt holding it (``halt_id``). :meth:`JournalStore.append_claimed` writes that row."""

    def __init__(self, held: HeldLock, row: Any, halt: Any) -> None:
        self.held = held
        self.mine = held.locked
        self.written = None if row is None else _entry(row)
        self.halt_id = None if halt is None or halt[0] is None else int(halt[0])


class JournalStore:
    """Appends and reads ``side_effect_journal`` rows over a connection pool.

    Pools from :func:`sagacity.store.db.open_pool` (autocommit) save a round trip per statement;
    other pools work too, since every multi-statement write runs in an explicit transaction.
    """

    def __init__(self, pool: Pool, *, max_retries: int = 64, lock_connections: int = 16) -> None:
        self._pool = pool
        self._max_retries = max_retries
        self._owns_pool = False
        self._owners = SagaOwners(pool)
        self._undo = UndoLocks(pool, connections=lock_connections)
        self._schema: str | None = None

    @property
    def pool(self) -> Pool:
        """The pool rows are read and written over (other stores of the same database share it)."""
        return self._pool

    @classmethod
    async def open(cls, conninfo: str, *, min_size: int = 1, max_size: int = 10) -> JournalStore:
        """A store with its own pool, closed by :meth:`close` or leaving ``async with``."""
        store = cls(await open_pool(conninfo, min_size=min_size, max_size=max_size))
        store._owns_pool = True
        return store

    async def close(self) -> None:
        """Close the connections :meth:`exclusive` used, and the pool if :meth:`open` made it
        (a pool passed in belongs to the caller)."""
        await self._undo.close()
        if self._owns_pool:
            await self._pool.close()

    async def _in(self, conn: psycopg.AsyncConnection[Any]) -> str:
        """The journal's schema, found through ``conn`` (one of the pool's) on first use."""
        if self._schema is None:
            self._schema = await pool_schema(self._pool, conn)
        return self._schema

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def append(self, draft: Draft) -> Entry:
        """Append ``draft`` after the saga's current tail and return the stored row.

        The primary key decides every race for a seq: a loser re-reads the tail and tries again
        (a dropped row could be an effect never compensated), up to ``max_retries`` times, then
        raises :class:`AppendContention` having written nothing. Appenders of one saga also
        queue on a per-saga advisory lock, so under load they take turns instead of racing: a
        pure retry race lets the last winner win again while losers back off, and starves them.
        Only writers outside that queue (``append_at``, other tools) can still make one lose.
        An INTENT a halt covers raises :class:`Halted` (no task queue said: see :meth:`append_at`).
        """
        with translate_errors(f"append to saga {draft.saga_id!r}"):
            for attempt in range(self._max_retries + 1):
                if attempt:
                    cap = min(_BACKOFF_CAP, _BACKOFF_BASE * 2**attempt)
                    await asyncio.sleep(random.uniform(0, cap))
                async with self._pool.connection() as conn, conn.transaction():
                    # Unlike SELECT ... FOR UPDATE on the tail, this locks a saga with no rows.
                    await conn.execute(
                        "SELECT pg_catalog.pg_advisory_xact_lock(%s, pg_catalog.hashtext(%s))",
                        (_APPEND_LOCK_SPACE, draft.saga_id),
                    )
                    schema = self._schema or await self._in(conn)
                    tail = await _head(conn, schema, draft.saga_id)
                    prev_hash = GENESIS_HASH if tail is None else tail.hash
                    seq = 1 if tail is None else tail.seq + 1
                    entry = seal(draft, seq=seq, prev_hash=prev_hash, timestamp=_now())
                    inserted, _ = await _try_insert(conn, schema, entry, prev_hash, None)
                if inserted:
                    return entry
        raise AppendContention(
            f"append to saga {draft.saga_id!r} lost the race for the next seq on every attempt "
            f"({self._max_retries + 1}); nothing was written"
        )

    async def append_at(
        self,
        draft: Draft,
        *,
        seq: int,
        prev_hash: str | None = None,
        exclusive: bool = False,
        task_queue: str | None = None,
        timestamp: datetime | None = None,
    ) -> Entry:
        """Append ``draft`` at ``seq`` exactly; idempotent, for callers that choose seqs.

        If ``seq`` already holds a row recording the same thing (a retry or replay), that row is
        returned, or with ``exclusive`` :class:`SeqTaken` is raised: the caller must know whether
        it wrote the row itself (two overlapping attempts of one call must not both proceed).
        ``timestamp``: the row's (None: now). A caller that tries one write again after an error
        that may have come after the commit (the answer lost with the connection) passes its
        first try's: the retry seals the very row the first try sent, and a row found there with
        its hash is its own, even ``exclusive`` (another writer's row, sealed at another
        microsecond, hashes otherwise). A
        different row there, or a predecessor whose hash is not ``prev_hash``, is a
        :class:`SeqConflict`. With ``prev_hash`` given this is one round trip; without, the
        predecessor is read first.

        An INTENT an operator's halt covers is never written: the journal's trigger refuses it
        (schema 0009) and :class:`Halted` is raised, whatever path writes it, so no INTENT
        follows a halt. ``task_queue``: the task queue of the worker about to act on the call,
        matched with a halt's task-queue scope (None: not said, held by every such halt).
        """
        (entry,) = await self.append_batch_at(
            [draft],
            seq=seq,
            prev_hash=prev_hash,
            exclusive=exclusive,
            task_queue=task_queue,
            timestamp=timestamp,
        )
        return entry

    async def append_batch_at(
        self,
        drafts: Sequence[Draft],
        *,
        seq: int,
        prev_hash: str | None = None,
        exclusive: bool = False,
        task_queue: str | None = None,
        timestamp: datetime | None = None,
    ) -> list[Entry]:
        """Append ``drafts`` at ``seq``, ``seq + 1``, …: all of them or, on any conflict, none.

        Each row follows the :meth:`append_at` rule, so replaying a whole batch returns the
        stored rows.
        """
        if not drafts:
            return []
        saga_id = drafts[0].saga_id
        if seq < 1:
            raise InvalidEntry(f"seq must be 1 or more, got {seq} (saga {saga_id!r})")
        if any(d.saga_id != saga_id for d in drafts):
            raise InvalidEntry(
                f"a batch appends to one saga; got {sorted({d.saga_id for d in drafts})}"
            )
        with translate_errors(f"append to saga {saga_id!r} at seq {seq}"):
            async with self._pool.connection() as conn:
                schema = self._schema or await self._in(conn)
                # A single row is one atomic statement; several need a transaction so that a
                # conflict part-way leaves none of them written.
                atomic: AbstractAsyncContextManager[object] = (
                    conn.transaction() if len(drafts) > 1 else nullcontext()
                )
                async with atomic:
                    if prev_hash is None:
                        prev_hash = await _predecessor_hash(conn, schema, saga_id, seq)
                    entries = []
                    for offset, draft in enumerate(drafts):
                        entry = await _insert_at(
                            conn,
                            schema,
                            seal(
                                draft,
                                seq=seq + offset,
                                prev_hash=prev_hash,
                                timestamp=timestamp or _now(),
                            ),
                            draft,
                            prev_hash,
                            exclusive,
                            task_queue,
                        )
                        entries.append(entry)
                        prev_hash = entry.hash
                    return entries

    async def get(self, saga_id: str, seq: int) -> Entry | None:
        """The row at ``seq``, or None."""
        with translate_errors(f"read saga {saga_id!r} seq {seq}"):
            async with self._pool.connection() as conn:
                return await _get(conn, await self._in(conn), saga_id, seq)

    async def head(self, saga_id: str) -> Entry | None:
        """The saga's last row, or None when it has none."""
        with translate_errors(f"read the head of saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                return await _head(conn, await self._in(conn), saga_id)

    async def after(self, saga_id: str, seq: int, *, limit: int) -> list[Entry]:
        """Up to ``limit`` rows after ``seq``, in seq order."""
        with translate_errors(f"read saga {saga_id!r} after seq {seq}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_AFTER, await self._in(conn)), (saga_id, seq, limit)
                )
                return [_entry(row) for row in await cur.fetchall()]

    async def claim(self, saga_id: str, *, workflow_id: str, first_run_id: str) -> SagaOwner:
        """Claim ``saga_id`` for a run chain, or say which holds it (:meth:`SagaOwners.claim`)."""
        return await self._owners.claim(saga_id, workflow_id=workflow_id, first_run_id=first_run_id)

    async def owners(
        self, *, saga_ids: Sequence[str] = (), workflow_ids: Sequence[str] = ()
    ) -> list[tuple[str, str]]:
        """Who claimed these sagas, and what these workflows claimed (:meth:`SagaOwners.owners`)."""
        return await self._owners.owners(saga_ids=saga_ids, workflow_ids=workflow_ids)

    async def chains(self, saga_ids: Sequence[str]) -> dict[str, tuple[str, str]]:
        """The run chain that owns each of these claimed sagas (:meth:`SagaOwners.chains`)."""
        return await self._owners.chains(saga_ids)

    async def names_tool(self, tool_name: str, *, timeout_s: float = 2.0) -> bool | None:
        """Whether any row names ``tool_name``; None when the scan took longer than
        ``timeout_s`` (no index serves it: for an operator's warning, never a hot path)."""
        with translate_errors(f"look for tool {tool_name!r}"):
            async with self._pool.connection() as conn, conn.transaction():
                await conn.execute(f"SET LOCAL statement_timeout = '{int(timeout_s * 1000)}ms'")
                try:
                    async with conn.transaction():
                        cur = await conn.execute(
                            qualify(_NAMES_TOOL, await self._in(conn)), (tool_name,)
                        )
                        row = await cur.fetchone()
                except psycopg.errors.QueryCanceled:
                    return None
        return bool(row and row[0])

    def exclusive(self, saga_id: str, seq: int) -> AbstractAsyncContextManager[bool]:
        """The undo lock on (saga, seq), held for the body (:meth:`UndoLocks.exclusive`)."""
        return self._undo.exclusive(saga_id, seq)

    @asynccontextmanager
    async def undo_claim(
        self, saga_id: str, call_seq: int, *, row_seq: int, tool_name: str, task_queue: str
    ) -> AsyncIterator[UndoClaim]:
        """The undo lock on the call at ``call_seq`` (:meth:`exclusive`), and in the same round
        trip, read once the lock is tried: the row at ``row_seq`` (where the undo's
        COMPENSATED row goes) and the halt that holds a compensation of ``tool_name`` from this
        ``task_queue``, if any (the gate's predicate, as :meth:`HaltStore.holding` asks it)."""
        if self._schema is None:
            with translate_errors(f"read saga {saga_id!r}"):
                async with self._pool.connection() as conn:
                    await self._in(conn)
        assert self._schema is not None
        reads = [
            (qualify(_GET, self._schema), (saga_id, row_seq)),
            (qualify(HALTED, self._schema), (saga_id, tool_name, task_queue, True)),
        ]
        async with self._undo.claim(saga_id, call_seq, reads) as held:
            yield UndoClaim(held, *held.rows)

    async def append_claimed(
        self, claim: UndoClaim, draft: Draft, *, seq: int, prev_hash: str
    ) -> Entry:
        """Append ``draft`` at ``seq`` as :meth:`append_at` does, over the connection of
        ``claim`` (held), and release its lock once the row is committed, in the same round
        trip: the lock is never free while the row is not in. A row not written (a conflict)
        keeps the lock, for the caller to write elsewhere under it. :class:`StoreUnavailable`
        when the round trip failed: the row may be committed (the lock goes with the session
        when the claim ends)."""
        assert self._schema is not None  # found by undo_claim
        entry = seal(draft, seq=seq, prev_hash=prev_hash, timestamp=_now())
        with translate_errors(f"append to saga {draft.saga_id!r} at seq {seq}"):
            row = await claim.held.write_then_release(
                (qualify(_INSERT, self._schema), insert_params(entry, prev_hash, None)),
                (qualify(_WRITTEN, self._schema), (entry.saga_id, entry.seq, entry.hash)),
            )
            assert row is not None  # the statement always returns exactly one row
            if row[0]:
                return entry
            return await _not_inserted(
                claim.held.conn, self._schema, entry, draft, prev_hash, row[1], exclusive=False
            )

    async def undoing(self, saga_id: str, seqs: Sequence[int]) -> list[int]:
        """The calls at ``seqs`` whose compensation runs now (:meth:`UndoLocks.undoing`)."""
        return await self._undo.undoing(saga_id, seqs)

    async def read(self, saga_id: str) -> list[Entry]:
        """All of the saga's rows in seq order, in one query (use :meth:`stream` for long sagas)."""
        with translate_errors(f"read saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(qualify(_SELECT_SAGA, await self._in(conn)), (saga_id,))
                return [_entry(row) for row in await cur.fetchall()]

    async def stream(self, saga_id: str, *, batch: int = 1000) -> AsyncGenerator[Entry, None]:
        """The saga's rows in seq order, fetched ``batch`` at a time through a server-side cursor.

        The cursor holds a pooled connection until the generator ends or is closed.
        """
        with translate_errors(f"read saga {saga_id!r}"):
            async with aclosing(self._rows(_SELECT_SAGA, (saga_id,), batch)) as rows:
                async for row in rows:
                    yield _entry(row)

    async def list_sagas(
        self,
        *,
        limit: int = 100,
        offset: int = 0,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> list[SagaSummary]:
        """Sagas with a row timestamped in ``[since, until)``, most recently active first.

        Aggregates the whole table: meant for operators' listings, not for hot paths.
        """
        params = {
            "since": None if since is None else naive_utc(since),
            "until": None if until is None else naive_utc(until),
            "limit": limit,
            "offset": offset,
        }
        with translate_errors("list sagas"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(qualify(_LIST_SAGAS, await self._in(conn)), params)
                return [
                    SagaSummary(
                        saga_id=saga_id,
                        rows=rows,
                        head_seq=head_seq,
                        head_hash=head_hash,
                        first_at=utc_micros(first_at),
                        last_at=utc_micros(last_at),
                        last_phase=_phase(phase),
                    )
                    for saga_id, rows, head_seq, head_hash, first_at, last_at, phase in (
                        await cur.fetchall()
                    )
                ]

    async def saga_ids(
        self, *, since: datetime | None = None, until: datetime | None = None, batch: int = 1000
    ) -> list[str]:
        """Every saga with a row timestamped in ``[since, until)``, most recently active first
        (:meth:`list_sagas`, ``batch`` at a time)."""
        ids: list[str] = []
        while True:
            page = await self.list_sagas(limit=batch, offset=len(ids), since=since, until=until)
            ids += [s.saga_id for s in page]
            if len(page) < batch:
                return ids

    async def verify(self, saga_id: str) -> Verdict:
        """Recompute the saga's chain from the stored rows; stops reading at the first bad row."""
        verifier = ChainVerifier(saga_id)
        async with aclosing(self.stream(saga_id)) as rows:
            async for entry in rows:
                if verifier.feed(entry) is not None:
                    break
        return verifier.verdict()

    async def verify_all(
        self, *, saga_ids: Sequence[str] | None = None
    ) -> AsyncGenerator[Verdict, None]:
        """One verdict per saga: the given ones in the given order, or every stored saga.

        Every stored saga is checked in one scan ordered by ``saga_id`` (the database's
        collation), holding one saga's verifier at a time. Closing the generator early (or
        ``aclosing``) releases the connection at once.
        """
        if saga_ids is not None:
            for saga_id in saga_ids:
                yield await self.verify(saga_id)
            return
        verifier: ChainVerifier | None = None
        with translate_errors("verify all sagas"):
            async with aclosing(self._rows(_SELECT_ALL, (), 1000)) as rows:
                async for row in rows:
                    entry = _entry(row)
                    if verifier is None or verifier.saga_id != entry.saga_id:
                        if verifier is not None:
                            yield verifier.verdict()
                        verifier = ChainVerifier(entry.saga_id)
                    verifier.feed(entry)
        if verifier is not None:
            yield verifier.verdict()

    async def _rows(
        self, template: str, params: tuple[object, ...], batch: int
    ) -> AsyncGenerator[tuple[Any, ...], None]:
        # A named cursor lives on the server and needs a transaction; rows arrive `batch` at a
        # time, so memory stays flat however long the saga.
        async with (
            self._pool.connection() as conn,
            conn.transaction(),
            conn.cursor(name="sagacity_rows") as cur,
        ):
            cur.itersize = batch
            await cur.execute(qualify(template, await self._in(conn)), params)
            async for row in cur:
                yield row


def _now() -> datetime:
    return datetime.now(UTC)


def _phase(raw: str) -> Phase:
    try:
        return Phase(raw)
    except ValueError:
        # Only a tampered row holds another phase. Keep its text so the verifier hashes what is
        # stored and reports the row, instead of the reader failing before verification.
        return cast(Phase, raw)


#: What a NULL in a hashed column reads as. The table refuses NULLs, so one means the table was
#: altered; Postgres text cannot hold a NUL character, so the row fails its hash check and is
#: reported, instead of the reader failing before verification.
_NULL_TEXT = "\x00"
_NULL_TIME = datetime(1, 1, 1, tzinfo=UTC)


def _entry(row: tuple[Any, ...]) -> Entry:
    saga_id, seq, tool_name, phase, input_, payload, timestamp, hash_ = row

    def text(value: str | None) -> str:
        return _NULL_TEXT if value is None else value

    return Entry(
        saga_id,
        seq,
        text(tool_name),
        _phase(text(phase)),
        text(input_),
        text(payload),
        _NULL_TIME if timestamp is None else utc_micros(timestamp),
        hash_ or "",
    )


async def _get(
    conn: psycopg.AsyncConnection[Any], schema: str, saga_id: str, seq: int
) -> Entry | None:
    cur = await conn.execute(qualify(_GET, schema), (saga_id, seq))
    row = await cur.fetchone()
    return None if row is None else _entry(row)


async def _head(conn: psycopg.AsyncConnection[Any], schema: str, saga_id: str) -> Entry | None:
    cur = await conn.execute(qualify(_HEAD, schema), (saga_id,))
    row = await cur.fetchone()
    return None if row is None else _entry(row)


async def _predecessor_hash(
    conn: psycopg.AsyncConnection[Any], schema: str, saga_id: str, seq: int
) -> str:
    if seq == 1:
        return GENESIS_HASH
    prev = await _get(conn, schema, saga_id, seq - 1)
    if prev is None:
        raise SeqConflict(f"saga {saga_id!r} has no row {seq - 1}, so nothing can go at seq {seq}")
    return prev.hash


async def _try_insert(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    entry: Entry,
    prev_hash: str,
    task_queue: str | None,
) -> tuple[bool, str | None]:
    """Insert ``entry`` if its seq is free and row seq-1 hashes to ``prev_hash``, and, for an
    INTENT, no halt covers it (else :class:`Halted`); ``task_queue``: the worker's that is
    about to act on it, which a halt's task-queue scope is matched with (None: not said, and
    held by every task-queue halt).

    Returns whether it went in, and the stored predecessor hash (None: no such row).
    """
    with halts_refuse(entry):
        cur = await conn.execute(
            qualify(_INSERT, schema), insert_params(entry, prev_hash, task_queue)
        )
    row = await cur.fetchone()
    assert row is not None  # the statement always returns exactly one row
    return row[0], row[1]


@contextmanager
def halts_refuse(entry: Entry) -> Iterator[None]:
    """The journal trigger's refusal of ``entry`` (an INTENT a halt covers) as :class:`Halted`."""
    try:
        yield
    except psycopg.Error as exc:
        if exc.sqlstate != HALTED_SQLSTATE:
            raise
        halt_id = _halt_id(exc.diag.message_detail)
        raise Halted(
            f"saga {entry.saga_id!r}: the call of {entry.tool_name!r} at seq {entry.seq} did not "
            f"start: halt {halt_id} covers it",
            halt_id,
        ) from None


async def read_spans(pool: Pool, wanted: Mapping[str, tuple[int, int]]) -> dict[str, list[Entry]]:
    """Each saga's journal rows after seq ``after`` through ``last`` (``wanted``: saga id ->
    ``(after, last)``), in seq order, by saga, in one query over ``pool`` (a saga with no such
    row is left out): what the transparency log's attestation reads ahead for a batch."""
    if not wanted:
        return {}
    afters, lasts = zip(*wanted.values(), strict=True)
    found: dict[str, list[Entry]] = {}
    with translate_errors(f"read {len(wanted)} sagas' rows"):
        async with pool.connection() as conn:
            cur = await conn.execute(
                qualify(_SPANS, await pool_schema(pool, conn)),
                (list(wanted), list(afters), list(lasts)),
            )
            for row in await cur.fetchall():
                entry = _entry(row)
                found.setdefault(entry.saga_id, []).append(entry)
    return found


def insert_params(entry: Entry, prev_hash: str, task_queue: str | None) -> dict[str, object]:
    """The parameters of ``_INSERT`` for ``entry`` (``_COLUMNS`` by name, and what it checks)."""
    return {
        "saga_id": entry.saga_id,
        "seq": entry.seq,
        "tool_name": entry.tool_name,
        "phase": entry.phase.value,
        "input": entry.input,
        "payload": entry.payload,
        "timestamp": naive_utc(entry.timestamp),
        "hash": entry.hash,
        "prev_hash": prev_hash,
        "genesis": GENESIS_HASH,
        "task_queue": task_queue or "",
    }


def _halt_id(detail: str | None) -> int:
    """The halt id the trigger's refusal names (0: unreadable, a halt all the same)."""
    try:
        return int(detail or "")
    except ValueError:
        return 0


async def _insert_at(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    entry: Entry,
    draft: Draft,
    prev_hash: str,
    exclusive: bool,
    task_queue: str | None,
) -> Entry:
    """Insert ``entry`` (``draft`` sealed after ``prev_hash``), or tell why it is not in."""
    inserted, stored_prev = await _try_insert(conn, schema, entry, prev_hash, task_queue)
    if inserted:
        return entry
    return await _not_inserted(conn, schema, entry, draft, prev_hash, stored_prev, exclusive)


async def _not_inserted(
    conn: psycopg.AsyncConnection[Any],
    schema: str,
    entry: Entry,
    draft: Draft,
    prev_hash: str,
    stored_prev: str | None,
    exclusive: bool,
) -> Entry:
    """An insert of ``entry`` that did not go in (``stored_prev``: the hash of the row before):
    the row already there when it records the same thing, else why not. With ``exclusive``,
    a row that records the same thing is :class:`SeqTaken` unless it is ``entry`` itself (its
    hash), which an earlier try of this very write committed."""
    seq = entry.seq
    where = f"saga {draft.saga_id!r} seq {seq}"
    if stored_prev is None:
        raise SeqConflict(f"{where}: there is no row {seq - 1} to follow")
    if stored_prev != prev_hash:
        follows = "the genesis hash" if seq == 1 else f"row {seq - 1}, hashed"
        raise SeqConflict(
            f"{where}: the caller said it follows {prev_hash[:12]}…, "
            f"but it follows {follows} {stored_prev[:12]}…"
        )
    # The predecessor matched, so the seq was taken: fine if it is this very row again.
    existing = await _get(conn, schema, draft.saga_id, seq)
    if existing is not None and existing.same_content(draft):
        if exclusive and existing.hash != entry.hash:
            raise SeqTaken(
                f"{where} already holds this {draft.phase} row, written by another writer"
            )
        return existing
    held = (
        "nothing readable"
        if existing is None
        else f"a different row ({existing.tool_name} {existing.phase}, hash {existing.hash[:12]}…)"
    )
    raise SeqConflict(f"{where} already holds {held}; refusing {draft.tool_name} {draft.phase}")
