"""A new saga's claim and its first INTENT in one statement: one round trip and one commit where
a claim and an append took two, the same rows (hashes included), and nothing more written when
the claim is not new, the saga had rows, or a halt covers the call."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest

from sagacity.errors import Halted
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, seal
from sagacity.store import JournalStore, open_pool
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.store.opening import claim_with_intent
from tests.store.test_halt_trigger import db, halt, halts  # noqa: F401  (fixtures)
from tests.store.test_round_trips import wire


def intent(saga_id: str) -> Entry:
    draft = Draft(saga_id, "reserve", Phase.INTENT, '{"n": 1}')
    return seal(draft, seq=1, prev_hash=GENESIS_HASH, timestamp=datetime.now(UTC))


async def test_a_new_claim_writes_the_intent_in_the_same_round_trip(
    database_url: str, tmp_path: Path
) -> None:
    async with await JournalStore.open(database_url, min_size=1, max_size=1) as store:
        for _ in range(6):  # psycopg prepares a statement once a connection has run it a few times
            await claim_with_intent(
                store, intent(f"warm-{uuid.uuid4().hex}"), workflow_id="w", first_run_id="r",
                task_queue="orders",
            )  # fmt: skip
        row = intent(f"saga-{uuid.uuid4().hex[:12]}")
        async with wire(store.pool, tmp_path / "open") as messages:
            owner, written = await claim_with_intent(
                store, row, workflow_id="wf-1", first_run_id="run-1", task_queue="orders"
            )
        assert messages["F Sync"] == 1 and messages["B ReadyForQuery"] == 1
        assert messages["F Query"] == 0  # autocommit: no BEGIN, no COMMIT
        assert owner.claimed_now and not owner.had_rows
        assert (owner.workflow_id, owner.first_run_id) == ("wf-1", "run-1")
        # the row stored is the sealed INTENT, hash and all, as append_at writes it
        assert written == row
        assert await store.read(row.saga_id) == [row]
        held = await store.claim(row.saga_id, workflow_id="wf-1", first_run_id="run-1")
        assert not held.claimed_now and held.first_run_id == "run-1"


async def test_a_try_after_a_lost_answer_finds_its_own_intent(store: JournalStore) -> None:
    row = intent(f"saga-{uuid.uuid4().hex[:12]}")
    await claim_with_intent(store, row, workflow_id="w", first_run_id="r", task_queue="q")
    owner, written = await claim_with_intent(
        store, row, workflow_id="w", first_run_id="r", task_queue="q"
    )
    assert owner.claimed_now and written == row
    assert await store.read(row.saga_id) == [row]


async def test_another_intent_at_seq_1_of_the_same_chain_is_not_taken_for_this_one(
    store: JournalStore,
) -> None:
    first = intent(f"saga-{uuid.uuid4().hex[:12]}")
    await claim_with_intent(store, first, workflow_id="w", first_run_id="r", task_queue="q")
    again = intent(first.saga_id)  # sealed at another microsecond: another writer's row
    owner, written = await claim_with_intent(
        store, again, workflow_id="w", first_run_id="r", task_queue="q"
    )
    assert not owner.claimed_now and written is None
    assert await store.read(first.saga_id) == [first]


async def test_a_saga_another_chain_holds_gets_no_row(store: JournalStore) -> None:
    saga_id = f"saga-{uuid.uuid4().hex[:12]}"
    await store.claim(saga_id, workflow_id="other", first_run_id="other-run")
    owner, written = await claim_with_intent(
        store, intent(saga_id), workflow_id="w", first_run_id="r", task_queue="q"
    )
    assert written is None and not owner.claimed_now
    assert (owner.workflow_id, owner.first_run_id) == ("other", "other-run")
    assert await store.read(saga_id) == []


async def test_rows_no_owner_claimed_keep_the_intent_out_but_the_claim_in(
    store: JournalStore,
) -> None:
    saga_id = f"saga-{uuid.uuid4().hex[:12]}"
    earlier = await store.append(Draft(saga_id, "reserve", Phase.INTENT, '{"n": 0}'))
    owner, written = await claim_with_intent(
        store, intent(saga_id), workflow_id="w", first_run_id="r", task_queue="q"
    )
    assert written is None and owner.claimed_now and owner.had_rows
    assert await store.read(saga_id) == [earlier]


async def test_a_halt_refuses_the_intent_and_writes_not_even_the_claim(
    db: tuple[str, str],  # noqa: F811
    halts: HaltStore,  # noqa: F811
) -> None:
    await halt(halts, HaltScope(task_queue="orders"))
    pool = await open_pool(db[1], max_size=1)
    try:
        store = JournalStore(pool)
        row = intent(f"saga-{uuid.uuid4().hex[:12]}")
        with pytest.raises(Halted):
            await claim_with_intent(
                store, row, workflow_id="w", first_run_id="r", task_queue="orders"
            )
        assert await store.read(row.saga_id) == []
        assert await store.chains([row.saga_id]) == {}
        # another task queue is not held: both go in
        owner, written = await claim_with_intent(
            store, row, workflow_id="w", first_run_id="r", task_queue="billing"
        )
        assert owner.claimed_now and written == row
    finally:
        await pool.close()
