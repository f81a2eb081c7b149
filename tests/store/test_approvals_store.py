"""ApprovalStore: pending approval requests, replaced on re-request, removed once decided."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from sagacity.errors import InvalidEntry
from sagacity.store import ApprovalRequest, ApprovalStore, input_hash


def request(saga_id: str, seq: int, args: str, at: datetime) -> ApprovalRequest:
    return ApprovalRequest(saga_id, seq, "wire_money", args, input_hash(args), at)


async def test_put_get_replace_delete(approvals: ApprovalStore, saga_id: str) -> None:
    at = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
    first = request(saga_id, 4, '{"eur": 10}', at)
    await approvals.put(first)
    assert await approvals.get(saga_id, 4) == first

    second = request(saga_id, 4, '{"eur": 12, "to": "Zoë"}', at + timedelta(minutes=1))
    await approvals.put(second)
    assert await approvals.list(saga_id=saga_id) == [second]

    assert await approvals.delete(saga_id, 4) is True
    assert await approvals.delete(saga_id, 4) is False
    assert await approvals.get(saga_id, 4) is None


async def test_list_is_oldest_first_and_filters_by_saga(
    approvals: ApprovalStore, saga_id: str
) -> None:
    now = datetime.now(UTC)
    # an aware non-UTC time is stored as the same instant and read back in UTC
    plus_two = timezone(timedelta(hours=2))
    newer = request(saga_id, 9, "{}", now)
    older = request(saga_id, 2, "{}", (now - timedelta(hours=1)).astimezone(plus_two))
    other = request(f"{saga_id}-other", 1, "{}", now)
    for req in (newer, older, other):
        await approvals.put(req)

    listed = await approvals.list(saga_id=saga_id)
    assert [(r.journal_seq, r.created_at) for r in listed] == [
        (2, older.created_at.astimezone(UTC)),
        (9, now),
    ]
    assert listed[0].created_at.tzinfo is UTC
    everyone = await approvals.list()
    assert {(r.saga_id, r.journal_seq) for r in everyone} >= {
        (saga_id, 2),
        (saga_id, 9),
        (f"{saga_id}-other", 1),
    }


def test_input_hash_is_sha256_of_the_utf8_text() -> None:
    assert input_hash("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    assert input_hash('{"a":1}') != input_hash('{"a": 1}')  # no JSON normalisation


async def test_refused_values_are_invalid_entry(approvals: ApprovalStore, saga_id: str) -> None:
    with pytest.raises(InvalidEntry):
        await approvals.put(request(saga_id, 1, '"\x00"', datetime.now(UTC)))
    assert await approvals.list(saga_id=saga_id) == []
