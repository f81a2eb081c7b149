"""JournalStore.append_at with ``timestamp``: a retry of one write (its first try's answer lost)
seals the very row again and takes it as its own, even ``exclusive``; another attempt of the same
call, sealed at any other microsecond, is still refused (SeqTaken), so it cannot run the tool too.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sagacity.errors import SeqTaken
from sagacity.journal import GENESIS_HASH, Draft, Phase
from sagacity.store import JournalStore

AT = datetime(2026, 12, 6, 12, 0, 0, 123456, tzinfo=UTC)


def _intent(saga_id: str) -> Draft:
    return Draft(saga_id, "send", Phase.INTENT, '{"to": "x"}')


async def test_a_retry_sealed_at_the_first_try_takes_its_own_row(
    store: JournalStore, saga_id: str
) -> None:
    first = await store.append_at(
        _intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT
    )
    again = await store.append_at(
        _intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT
    )
    assert again == first
    assert len(await store.read(saga_id)) == 1


@pytest.mark.parametrize("apart", [timedelta(microseconds=1), timedelta(seconds=-1)])
async def test_another_attempt_one_microsecond_apart_is_still_refused(
    store: JournalStore, saga_id: str, apart: timedelta
) -> None:
    await store.append_at(
        _intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT
    )
    with pytest.raises(SeqTaken):
        await store.append_at(
            _intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT + apart
        )
    # and one with no timestamp (now) too
    with pytest.raises(SeqTaken):
        await store.append_at(_intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True)


async def test_the_same_instant_in_another_zone_seals_the_same_row(
    store: JournalStore, saga_id: str
) -> None:
    """The row stores the instant in UTC: a retry given the first try's instant in another zone
    sends the very row, and the row read back hashes as it was sent."""
    first = await store.append_at(
        _intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT
    )
    elsewhere = AT.astimezone(timezone(timedelta(hours=5, minutes=30)))
    again = await store.append_at(
        _intent(saga_id), seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=elsewhere
    )
    (stored,) = await store.read(saga_id)
    assert again.hash == first.hash == stored.hash


async def test_a_retried_outcome_row_after_a_lost_answer_is_the_same_row(
    store: JournalStore, saga_id: str
) -> None:
    """The OUTCOME row (not exclusive): a retry sealed at the first try's time, or at another,
    returns the row that is there, once."""
    intent = await store.append_at(_intent(saga_id), seq=1, prev_hash=GENESIS_HASH)
    done = Draft(saga_id, "send", Phase.EXECUTED, '{"to": "x"}', '{"ok": true}')
    first = await store.append_at(done, seq=2, prev_hash=intent.hash, timestamp=AT)
    assert await store.append_at(done, seq=2, prev_hash=intent.hash, timestamp=AT) == first
    assert await store.append_at(done, seq=2, prev_hash=intent.hash) == first
    assert [r.phase for r in await store.read(saga_id)] == [Phase.INTENT, Phase.EXECUTED]


async def test_a_retried_batch_sealed_at_the_first_try_is_the_same_rows(
    store: JournalStore, saga_id: str
) -> None:
    rows = [_intent(saga_id), Draft(saga_id, "send", Phase.EXECUTED, '{"to": "x"}', "{}")]
    first = await store.append_batch_at(
        rows, seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT
    )
    again = await store.append_batch_at(
        rows, seq=1, prev_hash=GENESIS_HASH, exclusive=True, timestamp=AT
    )
    assert again == first
