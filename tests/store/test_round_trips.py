"""What a tool call's journal writes cost the database: each of them, its INTENT (halt-guarded,
exclusive) and its outcome, is one prepared statement in one round trip, committed on its own.

Measured on the wire (libpq's protocol trace), so a change that adds a statement, a transaction
block or a second round trip to the call path fails here, not only in a benchmark.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from psycopg import pq

from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase
from sagacity.store import JournalStore, Pool


@asynccontextmanager
async def wire(pool: Pool, path: Path) -> AsyncIterator[collections.Counter[str]]:
    """The protocol messages the pool's one connection exchanges in the block, counted by
    direction and type (``F Sync``: sent; ``B ReadyForQuery``: received)."""
    seen: collections.Counter[str] = collections.Counter()
    async with pool.connection() as conn:
        pgconn = conn.pgconn  # the pool's only connection: the block's requests get it again
    with path.open("w") as out:
        pgconn.trace(out.fileno())
        pgconn.set_trace_flags(pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield seen
        finally:
            pgconn.untrace()
    for line in path.read_text().splitlines():
        direction, _size, kind = line.split("\t")[:3]
        seen[f"{direction} {kind.split()[0]}"] += 1


async def call(store: JournalStore, saga_id: str, seq: int, prev: str) -> Entry:
    """One tool call's rows as the call activity writes them."""
    intent = await store.append_at(
        Draft(saga_id, "reserve", Phase.INTENT, '{"n": 1}'),
        seq=seq,
        prev_hash=prev,
        exclusive=True,
        task_queue="orders",
    )
    return await store.append_at(
        Draft(saga_id, "reserve", Phase.EXECUTED, '{"n": 1}', '{"ok": true}'),
        seq=seq + 1,
        prev_hash=intent.hash,
    )


async def test_each_journal_write_of_a_call_is_one_prepared_round_trip(
    database_url: str, saga_id: str, tmp_path: Path
) -> None:
    async with await JournalStore.open(database_url, min_size=1, max_size=1) as store:
        head = GENESIS_HASH
        # psycopg prepares a statement once a connection has run it a few times
        for seq in (1, 3, 5):
            head = (await call(store, saga_id, seq, head)).hash

        async with wire(store.pool, tmp_path / "intent") as intent:
            row = await store.append_at(
                Draft(saga_id, "reserve", Phase.INTENT, '{"n": 2}'),
                seq=7,
                prev_hash=head,
                exclusive=True,
                task_queue="orders",
            )
        async with wire(store.pool, tmp_path / "outcome") as outcome:
            await store.append_at(
                Draft(saga_id, "reserve", Phase.EXECUTED, '{"n": 2}', '{"ok": true}'),
                seq=8,
                prev_hash=row.hash,
            )

        assert [e.seq for e in await store.read(saga_id)] == list(range(1, 9))
    for messages in (intent, outcome):
        # one request, answered once: no BEGIN or COMMIT (autocommit), no read before the insert
        assert messages["F Sync"] == 1 and messages["F Query"] == 0
        assert messages["B ReadyForQuery"] == 1
        # the statement is prepared: bound by name, never parsed again
        assert messages["F Bind"] == 1 and messages["F Parse"] == 0
