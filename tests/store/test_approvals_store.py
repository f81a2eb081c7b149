"""ApprovalStore: pending approval requests, replaced on re-request, removed once decided."""

from __future__ import annotations

import random
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone

import pytest

from sagacity.errors import InvalidEntry
from sagacity.store import ApprovalRequest, ApprovalStore, input_hash
from sagacity.store.approvals import InboxFilter


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


async def test_the_inbox_pages_through_ties_in_order_and_counts_by_tool(
    approvals: ApprovalStore, saga_id: str
) -> None:
    # a minute of its own, far from other tests' rows: the window isolates this test's requests
    at = datetime(2030, 1, 1, tzinfo=UTC) + timedelta(minutes=random.randrange(10**6))
    window = InboxFilter(requested_after=at, requested_before=at + timedelta(seconds=59))
    tools = ("wire", "charge")
    # seven at one instant (ties go by saga, then seq), five later; two tools
    reqs = [
        ApprovalRequest(
            f"{saga_id}-{i % 3}",
            i,
            tools[i % 2],
            "{}",
            input_hash("{}"),
            at if i < 7 else at + timedelta(seconds=i),
            at + timedelta(days=7),
        )
        for i in range(1, 13)
    ]
    for req in reversed(reqs):
        await approvals.put(req)

    seen: list[ApprovalRequest] = []
    after = None
    while page := await approvals.page(window, after=after, limit=5):
        seen += page
        after = page[-1].cursor
    assert [r.cursor for r in seen] == sorted(r.cursor for r in reqs)  # each once, in order
    assert seen[0].expires_at == at + timedelta(days=7)

    wires = replace(window, tool_names=("wire",))
    assert [r.tool_name for r in await approvals.page(wires, limit=50)] == ["wire"] * 6
    counts = await approvals.counts(wires)
    assert (counts.total, counts.by_tool) == (6, {"wire": 6, "charge": 6})
    # waiting at least as long as the later ones have: the first instant's seven
    early = replace(window, requested_before=at + timedelta(seconds=1))
    assert (await approvals.counts(early)).total == 6
    assert (await approvals.counts(replace(window, saga_id=f"{saga_id}-0"))).total == 4
