"""JournalStore.undo_claim: a compensation's lock, the row where its COMPENSATED row goes and the
halt gate in one round trip; its row written, committed and the lock released in one more."""

from __future__ import annotations

import asyncio

import pytest

from sagacity.errors import SeqConflict
from sagacity.journal import GENESIS_HASH, Draft, Phase
from sagacity.store import JournalStore


def _rows(saga_id: str) -> list[Draft]:
    return [
        Draft(saga_id, "book", Phase.INTENT, '{"room": 1}'),
        Draft(saga_id, "book", Phase.EXECUTED, '{"room": 1}', '{"id": 7}'),
    ]


def _done(saga_id: str) -> Draft:
    return Draft(saga_id, "book", Phase.COMPENSATED, '{"room": 1}')


def _claim(store: JournalStore, saga_id: str):  # type: ignore[no-untyped-def]
    return store.undo_claim(saga_id, 1, row_seq=3, tool_name="book", task_queue="q")


async def test_the_row_is_committed_before_the_lock_is_free(
    store: JournalStore, saga_id: str
) -> None:
    executed = (await store.append_batch_at(_rows(saga_id), seq=1, prev_hash=GENESIS_HASH))[-1]
    async with _claim(store, saga_id) as held:
        assert held.mine and held.written is None and held.halt_id is None
        async with _claim(store, saga_id) as other:
            assert not other.mine  # one attempt at a time
        row = await store.append_claimed(held, _done(saga_id), seq=3, prev_hash=executed.hash)
        assert await store.get(saga_id, 3) == row
        # released with the commit, before the body ends: the next attempt holds it, and reads
        # the row (so it does not undo again)
        async with _claim(store, saga_id) as next_attempt:
            assert next_attempt.mine and next_attempt.written == row
    assert await store.undoing(saga_id, [1]) == []


async def test_a_row_not_written_keeps_the_lock_until_the_body_ends(
    store: JournalStore, saga_id: str
) -> None:
    rows = await store.append_batch_at(
        [*_rows(saga_id), Draft(saga_id, "other", Phase.INTENT, "{}")],
        seq=1,
        prev_hash=GENESIS_HASH,
    )
    async with _claim(store, saga_id) as held:
        assert held.mine and held.written == rows[-1]
        with pytest.raises(SeqConflict):
            await store.append_claimed(held, _done(saga_id), seq=3, prev_hash=rows[1].hash)
        # the caller writes elsewhere under the lock (a compensation appends after the tail)
        assert await store.undoing(saga_id, [1]) == [1]
        row = await store.append(_done(saga_id))
        assert row.seq == 4
    assert await store.undoing(saga_id, [1]) == []
    async with _claim(store, saga_id) as later:
        assert later.mine


async def test_an_undo_after_the_locks_sat_idle_takes_the_kept_session(
    store: JournalStore, saga_id: str
) -> None:
    async with _claim(store, saga_id) as first:
        assert first.mine
    locks = await store._undo._locks()
    # the sessions open once the pool settles: the claim's, and any it opened meanwhile (the
    # first claim waited for a connection, which makes it open more); any may be the one kept
    for _ in range(500):
        if len(locks._pool) == locks._nconns:
            break
        await asyncio.sleep(0.01)
    sessions = {conn.info.backend_pid for conn in locks._pool}
    # what the pool does after each ten idle minutes (psycopg_pool's ShrinkPool timer): without
    # a connection kept, the next undo would pay for a new session
    for _ in range(3):
        await locks._shrink_pool()
    async with _claim(store, saga_id) as later:
        assert later.mine and later.held.conn.info.backend_pid in sessions
    await store.close()
