"""Conversation versions in Postgres: stored once, loaded whole, and any change behind them shows."""

from __future__ import annotations

import asyncio

import psycopg
import pytest

from sagacity.errors import ConversationTampered
from sagacity.store import Pool
from sagacity.store.conversations import ConversationStore

SAID = [{"role": "user", "content": "reserve 2 widgets"}]
REPLY = [{"type": "function_call", "name": "reserve", "arguments": '{"n": 2}', "call_id": "c1"}]
OUTPUT = [{"type": "function_call_output", "call_id": "c1", "output": "r-1 ✓"}]


async def test_versions_chain_and_load_whole(pool: Pool, saga_id: str) -> None:
    store = ConversationStore(pool)
    first = await store.put(saga_id, None, SAID)
    second = await store.put(saga_id, first.hash, [*REPLY, *OUTPUT])
    assert (first.length, second.length) == (1, 3)
    assert await store.get(saga_id, second.hash) == [*SAID, *REPLY, *OUTPUT]
    assert await store.get(saga_id, first.hash) == SAID
    # a retried call stores nothing new, whoever gets there first
    again = await asyncio.gather(
        *(store.put(saga_id, first.hash, [*REPLY, *OUTPUT]) for _ in range(5))
    )
    assert {v.hash for v in again} == {second.hash}
    # a run that took another way from the same version (a reset) adds a branch beside it
    other = await store.put(saga_id, first.hash, [{"role": "user", "content": "no, 3"}])
    assert other.hash != second.hash
    assert await store.get(saga_id, second.hash) == [*SAID, *REPLY, *OUTPUT]


async def test_an_unknown_base_or_version_is_refused(pool: Pool, saga_id: str) -> None:
    store = ConversationStore(pool)
    with pytest.raises(ConversationTampered, match="is not stored"):
        await store.put(saga_id, "0" * 64, SAID)
    with pytest.raises(ConversationTampered, match="missing"):
        await store.get(saga_id, "0" * 64)
    first = await store.put(saga_id, None, SAID)
    with pytest.raises(ConversationTampered):
        await store.get(f"{saga_id}-other", first.hash)  # one saga cannot read another's


@pytest.mark.parametrize(
    "attack",
    [
        "UPDATE sagacity_conversation SET items = replace(items, 'widgets', 'gadgets')"
        " WHERE saga_id = %s",
        "DELETE FROM sagacity_conversation WHERE saga_id = %s AND base_hash IS NULL",
    ],
    ids=["edited", "first-version-deleted"],
)
async def test_a_change_by_the_table_owner_is_caught(
    pool: Pool, owner: psycopg.AsyncConnection, saga_id: str, attack: str
) -> None:
    store = ConversationStore(pool)
    first = await store.put(saga_id, None, SAID)
    tip = await store.put(saga_id, first.hash, REPLY)
    await owner.execute(attack, (saga_id,))
    with pytest.raises(ConversationTampered):
        await store.get(saga_id, tip.hash)


async def test_the_app_role_cannot_change_a_version(pool: Pool, saga_id: str) -> None:
    store = ConversationStore(pool)
    await store.put(saga_id, None, SAID)
    for statement in (
        "UPDATE sagacity_conversation SET items = '[]' WHERE saga_id = %s",
        "DELETE FROM sagacity_conversation WHERE saga_id = %s",
    ):
        async with pool.connection() as conn:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                await conn.execute(statement, (saga_id,))
