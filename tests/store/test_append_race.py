"""Concurrent appends to one saga: none lost, none duplicated, and a bounded retry."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from sagacity.errors import AppendContention
from sagacity.journal import Draft, Entry, Phase, seal
from sagacity.store import JournalStore, Pool

WRITERS = 16
APPENDS = 200


async def test_concurrent_writers_from_an_empty_saga(pool: Pool, saga_id: str) -> None:
    store = JournalStore(pool)

    async def writer(w: int) -> list[int]:
        return [
            (
                await store.append(Draft(saga_id, "tick", Phase.INTENT, f'{{"w": {w}, "i": {i}}}'))
            ).seq
            for i in range(APPENDS)
        ]

    seqs = await asyncio.gather(*(writer(w) for w in range(WRITERS)))

    rows = await store.read(saga_id)
    assert [r.seq for r in rows] == list(range(1, WRITERS * APPENDS + 1))
    assert sorted(s for per in seqs for s in per) == [r.seq for r in rows]
    assert {r.input for r in rows} == {
        f'{{"w": {w}, "i": {i}}}' for w in range(WRITERS) for i in range(APPENDS)
    }
    verdict = await store.verify(saga_id)
    assert verdict.ok, verdict.problem
    assert verdict.rows == WRITERS * APPENDS


async def _lose_one_race(
    store: JournalStore, owner: psycopg.AsyncConnection, database_url: str, saga_id: str
) -> Entry:
    """Append to a saga whose seq 2 a rival claims and commits while the append waits on it."""
    first = await store.append(Draft(saga_id, "tick", Phase.INTENT, "1"))
    rival = seal(
        Draft(saga_id, "rival", Phase.INTENT, "2"),
        seq=2,
        prev_hash=first.hash,
        timestamp=first.timestamp,
    )
    async with await psycopg.AsyncConnection.connect(database_url) as competitor:
        # The rival's row is inserted but uncommitted: the append reads tail 1, tries seq 2 and
        # waits on that row. Once the rival commits, the append's attempt has lost.
        await competitor.execute(
            f"INSERT INTO side_effect_journal VALUES ({', '.join(['%s'] * 8)})",
            (
                saga_id,
                2,
                rival.tool_name,
                rival.phase.value,
                rival.input,
                rival.payload,
                rival.timestamp.replace(tzinfo=None),
                rival.hash,
            ),
        )
        append = asyncio.create_task(store.append(Draft(saga_id, "tick", Phase.INTENT, "3")))
        await _until_waiting_on_a_lock(owner)
        await competitor.commit()
        return await append


async def test_a_lost_race_is_retried_against_the_new_tail(
    pool: Pool, owner: psycopg.AsyncConnection, database_url: str, saga_id: str
) -> None:
    store = JournalStore(pool, max_retries=1)
    entry = await _lose_one_race(store, owner, database_url, saga_id)
    assert entry.seq == 3
    assert [r.tool_name for r in await store.read(saga_id)] == ["tick", "rival", "tick"]
    assert (await store.verify(saga_id)).ok


async def test_exhausted_retries_raise_and_write_nothing(
    pool: Pool, owner: psycopg.AsyncConnection, database_url: str, saga_id: str
) -> None:
    store = JournalStore(pool, max_retries=0)
    with pytest.raises(
        AppendContention, match=r"lost the race for the next seq on every attempt \(1\)"
    ):
        await _lose_one_race(store, owner, database_url, saga_id)
    assert [r.tool_name for r in await store.read(saga_id)] == ["tick", "rival"]


async def _until_waiting_on_a_lock(conn: psycopg.AsyncConnection) -> None:
    for _ in range(500):
        cur = await conn.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event = 'transactionid'"
        )
        row = await cur.fetchone()
        if row is not None and row[0] > 0:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("the append never waited on the competitor's uncommitted row")


@pytest.mark.parametrize("rival_commits", [True, False])
async def test_a_claim_waiting_on_a_rival_claim_gets_its_outcome(
    pool: Pool, owner: psycopg.AsyncConnection, database_url: str, saga_id: str, rival_commits: bool
) -> None:
    """A claim that waits on another run's uncommitted claim ends up with whoever committed."""
    store = JournalStore(pool)
    async with await psycopg.AsyncConnection.connect(database_url) as rival:
        await rival.execute(
            "INSERT INTO sagacity_saga_owner (saga_id, workflow_id, first_run_id)"
            " VALUES (%s, 'rival-wf', 'rival-run')",
            (saga_id,),
        )
        claim = asyncio.create_task(store.claim(saga_id, workflow_id="wf", first_run_id="run"))
        await _until_waiting_on_a_lock(owner)
        await (rival.commit() if rival_commits else rival.rollback())
        held = await claim
    if rival_commits:
        assert (held.workflow_id, held.first_run_id) == ("rival-wf", "rival-run")
        assert not held.claimed_now
    else:
        assert (held.workflow_id, held.first_run_id, held.claimed_now) == ("wf", "run", True)
    again = await store.claim(saga_id, workflow_id="other", first_run_id="other-run")
    assert again.first_run_id == held.first_run_id and not again.claimed_now
