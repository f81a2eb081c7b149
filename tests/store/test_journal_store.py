"""JournalStore: appends, idempotent appends at a chosen seq, reads, listings."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from sagacity.errors import InvalidEntry, SeqConflict, SeqTaken, StoreUnavailable
from sagacity.journal import GENESIS_HASH, Draft, Phase, entry_hash
from sagacity.store import JournalStore, SagaSummary


def intent(saga_id: str, n: int = 0) -> Draft:
    return Draft(saga_id, "charge_card", Phase.INTENT, input=f'{{"n": {n}}}')


async def count(conn: psycopg.AsyncConnection, saga_id: str | None = None) -> int:
    cur = await conn.execute(
        "SELECT count(*) FROM side_effect_journal WHERE %(s)s::text IS NULL OR saga_id = %(s)s",
        {"s": saga_id},
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_append_chains_rows_from_genesis(store: JournalStore, saga_id: str) -> None:
    before = datetime.now(UTC)
    first = await store.append(intent(saga_id))
    second = await store.append(Draft(saga_id, "charge_card", Phase.EXECUTED, '{"n": 0}', "ok ✓"))

    assert (first.seq, second.seq) == (1, 2)
    assert first.hash == entry_hash(GENESIS_HASH, first)
    assert second.hash == entry_hash(first.hash, second)
    assert before <= first.timestamp <= second.timestamp <= datetime.now(UTC)
    # what comes back from the database is exactly what was sealed, timestamp included
    assert await store.read(saga_id) == [first, second]
    assert await store.get(saga_id, 2) == second
    assert await store.head(saga_id) == second


async def test_missing_saga_reads_empty(store: JournalStore, saga_id: str) -> None:
    assert await store.head(saga_id) is None
    assert await store.get(saga_id, 1) is None
    assert await store.read(saga_id) == []


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("phase", "DONE"),
        ("input", "not json"),
        ("input", '{"note": "a\x00b"}'),
        ("payload", "a\x00b"),
        ("saga_id", ""),
    ],
)
async def test_bad_input_writes_nothing(
    store: JournalStore, owner: psycopg.AsyncConnection, field: str, value: str
) -> None:
    fields = {
        "saga_id": "bad-input",
        "tool_name": "t",
        "phase": "INTENT",
        "input": "",
        "payload": "",
    }
    fields[field] = value
    before = await count(owner)
    with pytest.raises(InvalidEntry):
        await store.append(Draft(**fields))  # type: ignore[arg-type]
    assert await count(owner) == before


async def test_append_at_same_draft_twice_is_one_row(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    first = await store.append_at(intent(saga_id), seq=1, prev_hash=GENESIS_HASH)
    again = await store.append_at(intent(saga_id), seq=1, prev_hash=GENESIS_HASH)
    assert again == first  # the stored row, not a fresh seal with a new timestamp
    second = await store.append_at(intent(saga_id, 2), seq=2)  # predecessor read by the store
    assert await store.append_at(intent(saga_id, 2), seq=2, prev_hash=first.hash) == second
    assert await count(owner, saga_id) == 2
    assert (await store.verify(saga_id)).ok


async def test_exclusive_append_at_tells_a_second_writer_the_row_is_not_its_own(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    await store.append_at(intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True)
    with pytest.raises(SeqTaken, match="written by another writer"):
        await store.append_at(intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True)
    assert await count(owner, saga_id) == 1


async def test_append_at_taken_seq_with_other_content_conflicts(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    await store.append_at(intent(saga_id), seq=1, prev_hash=GENESIS_HASH)
    with pytest.raises(SeqConflict, match=rf"saga '{saga_id}' seq 1 already holds a different row"):
        await store.append_at(intent(saga_id, 99), seq=1, prev_hash=GENESIS_HASH)
    assert await count(owner, saga_id) == 1


async def test_append_at_wrong_prev_hash_conflicts(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    first = await store.append_at(intent(saga_id), seq=1)
    with pytest.raises(SeqConflict, match=f"follows row 1, hashed {first.hash[:12]}"):
        await store.append_at(intent(saga_id, 2), seq=2, prev_hash="f" * 64)
    with pytest.raises(SeqConflict, match="follows the genesis hash"):
        await store.append_at(intent(f"{saga_id}-b"), seq=1, prev_hash=first.hash)
    assert await count(owner, saga_id) == 1
    assert await count(owner, f"{saga_id}-b") == 0


async def test_append_at_without_predecessor_conflicts(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    first = await store.append_at(intent(saga_id), seq=1)
    with pytest.raises(SeqConflict, match="has no row 2"):
        await store.append_at(intent(saga_id, 3), seq=3)
    with pytest.raises(SeqConflict, match="no row 2 to follow"):
        await store.append_at(intent(saga_id, 3), seq=3, prev_hash=first.hash)
    with pytest.raises(InvalidEntry):
        await store.append_at(intent(saga_id), seq=0)
    assert await count(owner, saga_id) == 1


async def test_append_batch_at_is_idempotent_and_all_or_nothing(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    drafts = [intent(saga_id, n) for n in range(3)]
    rows = await store.append_batch_at(drafts, seq=1, prev_hash=GENESIS_HASH)
    assert [r.seq for r in rows] == [1, 2, 3]
    assert await store.append_batch_at(drafts, seq=1) == rows  # replayed whole
    # rows 4 and 5 are new, but 3 is taken by other content: neither new row may stay
    with pytest.raises(SeqConflict, match="seq 3 already holds"):
        await store.append_batch_at([intent(saga_id, 9), *drafts[:2]], seq=3)
    assert await count(owner, saga_id) == 3
    with pytest.raises(InvalidEntry, match="one saga"):
        await store.append_batch_at([intent(saga_id), intent("other")], seq=4)
    assert await store.append_batch_at([], seq=4) == []
    assert (await store.verify(saga_id)).ok


async def test_append_continues_after_append_at(store: JournalStore, saga_id: str) -> None:
    await store.append_batch_at([intent(saga_id, n) for n in range(2)], seq=1)
    assert (await store.append(intent(saga_id, 2))).seq == 3
    assert (await store.verify(saga_id)).ok


async def test_stream_yields_every_row_in_order(store: JournalStore, saga_id: str) -> None:
    drafts = [intent(saga_id, n) for n in range(5000)]
    written = await store.append_batch_at(drafts, seq=1)
    streamed = [entry async for entry in store.stream(saga_id, batch=333)]
    assert streamed == written
    verdict = await store.verify(saga_id)
    assert (verdict.ok, verdict.rows, verdict.head_hash) == (True, 5000, written[-1].hash)


async def test_list_sagas_summarises_and_filters(store: JournalStore) -> None:
    start = datetime.now(UTC)
    ids = [f"list-{start.timestamp()}-{n}" for n in range(3)]
    only = await store.append(intent(ids[0]))
    between = datetime.now(UTC)
    for saga_id in ids[1:]:
        first = await store.append(intent(saga_id))
        last = await store.append(Draft(saga_id, "charge_card", Phase.FAILED, "", "boom"))

    newest_first = await store.list_sagas(since=start)
    assert [s.saga_id for s in newest_first] == ids[::-1]
    assert newest_first[0] == SagaSummary(
        ids[2], 2, 2, last.hash, first.timestamp, last.timestamp, Phase.FAILED
    )
    assert newest_first[2] == SagaSummary(
        ids[0], 1, 1, only.hash, only.timestamp, only.timestamp, Phase.INTENT
    )
    assert [s.saga_id for s in await store.list_sagas(since=start, limit=1, offset=1)] == [ids[1]]
    assert [s.saga_id for s in await store.list_sagas(since=start, until=between)] == [ids[0]]
    assert await store.list_sagas(since=datetime.now(UTC) + timedelta(seconds=1)) == []


async def test_unreachable_database_is_store_unavailable() -> None:
    with pytest.raises(StoreUnavailable, match="connect to the journal database"):
        await JournalStore.open("postgresql://postgres@127.0.0.1:1/nowhere")
