"""Verifying stored chains: every edit an attacker with SQL access can make is caught."""

from __future__ import annotations

import psycopg
import pytest

from sagacity.journal import Draft, Fault, Phase
from sagacity.store import JournalStore

SWAP_2_AND_4 = """
UPDATE side_effect_journal AS t
SET tool_name = o.tool_name, phase = o.phase, input = o.input, payload = o.payload,
    timestamp = o.timestamp, hash = o.hash
FROM side_effect_journal AS o
WHERE t.saga_id = %(saga)s AND o.saga_id = %(saga)s
  AND ((t.seq = 2 AND o.seq = 4) OR (t.seq = 4 AND o.seq = 2))
"""

FORGE_7 = """
INSERT INTO side_effect_journal VALUES
    (%(saga)s, 7, 'refund', 'EXECUTED', '{"amount": 1}', '', now() AT TIME ZONE 'UTC', %(hash)s)
"""

# attack SQL (%(saga)s is the saga) -> fault, seq the verdict names, last seq that still verifies
ATTACKS = {
    "changed input": (
        """UPDATE side_effect_journal SET input = '{"amount": 9999}'"""
        " WHERE saga_id = %(saga)s AND seq = 3",
        Fault.HASH_MISMATCH,
        3,
        2,
    ),
    "changed payload": (
        "UPDATE side_effect_journal SET payload = 'ok' WHERE saga_id = %(saga)s AND seq = 2",
        Fault.HASH_MISMATCH,
        2,
        1,
    ),
    "changed phase": (
        "UPDATE side_effect_journal SET phase = 'COMPENSATED' WHERE saga_id = %(saga)s AND seq = 5",
        Fault.HASH_MISMATCH,
        5,
        4,
    ),
    "unknown phase": (
        "UPDATE side_effect_journal SET phase = 'BOGUS' WHERE saga_id = %(saga)s AND seq = 5",
        Fault.HASH_MISMATCH,
        5,
        4,
    ),
    "changed timestamp": (
        "UPDATE side_effect_journal SET timestamp = timestamp + interval '1 microsecond'"
        " WHERE saga_id = %(saga)s AND seq = 4",
        Fault.HASH_MISMATCH,
        4,
        3,
    ),
    "deleted middle row": (
        "DELETE FROM side_effect_journal WHERE saga_id = %(saga)s AND seq = 3",
        Fault.GAP,
        4,
        2,
    ),
    "deleted first row": (
        "DELETE FROM side_effect_journal WHERE saga_id = %(saga)s AND seq = 1",
        Fault.WRONG_GENESIS,
        2,
        0,
    ),
    "swapped rows": (SWAP_2_AND_4, Fault.HASH_MISMATCH, 2, 1),
    "forged row with a wrong hash": (FORGE_7, Fault.HASH_MISMATCH, 7, 6),
}


async def six_rows(store: JournalStore, saga_id: str) -> None:
    for n in range(3):
        args = f'{{"amount": {n + 1}, "to": "Zoë"}}'
        await store.append(Draft(saga_id, "pay", Phase.INTENT, args))
        await store.append(Draft(saga_id, "pay", Phase.EXECUTED, args, f'{{"id": "tx{n}"}}'))


async def test_untouched_chain_verifies(store: JournalStore, saga_id: str) -> None:
    await six_rows(store, saga_id)
    head = await store.head(saga_id)
    verdict = await store.verify(saga_id)
    assert head is not None
    assert (verdict.ok, verdict.rows, verdict.head_seq, verdict.head_hash) == (
        True,
        6,
        6,
        head.hash,
    )


@pytest.mark.parametrize("attack", ATTACKS)
async def test_tampering_is_caught(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str, attack: str
) -> None:
    await six_rows(store, saga_id)
    sql, fault, seq, last_good = ATTACKS[attack]
    await owner.execute(sql, {"saga": saga_id, "hash": "f" * 64})

    verdict = await store.verify(saga_id)

    assert verdict.problem is not None
    assert (verdict.problem.fault, verdict.problem.seq) == (fault, seq)
    assert verdict.head_seq == last_good


async def test_verify_all_reports_each_saga(
    store: JournalStore, owner: psycopg.AsyncConnection
) -> None:
    clean, tampered, empty = "va-clean", "va-tampered", "va-never-written"
    for saga_id in (clean, tampered):
        await six_rows(store, saga_id)
    await owner.execute(ATTACKS["changed payload"][0], {"saga": tampered})

    chosen = [v async for v in store.verify_all(saga_ids=[tampered, empty, clean])]
    assert [(v.saga_id, v.ok, v.rows) for v in chosen] == [
        (tampered, False, 2),
        (empty, True, 0),
        (clean, True, 6),
    ]

    everything = [v async for v in store.verify_all()]
    ids = [v.saga_id for v in everything]
    assert len(ids) == len(set(ids))  # each saga once
    by_id = {v.saga_id: v for v in everything}
    assert by_id[clean] == chosen[2]
    assert by_id[tampered].problem == chosen[0].problem
    assert empty not in by_id


@pytest.mark.parametrize("column", ["input", "payload", "tool_name", "phase", "timestamp", "hash"])
async def test_a_null_the_owner_allowed_is_reported_not_a_crash(
    store: JournalStore, owner: psycopg.AsyncConnection, saga_id: str, column: str
) -> None:
    """The table refuses NULLs; an owner who drops the constraint gets the row reported."""
    await six_rows(store, saga_id)
    await owner.execute(f"ALTER TABLE side_effect_journal ALTER COLUMN {column} DROP NOT NULL")
    try:
        await owner.execute(
            f"UPDATE side_effect_journal SET {column} = NULL WHERE saga_id = %s AND seq = 3",
            (saga_id,),
        )
        verdict = await store.verify(saga_id)
        assert verdict.problem is not None
        assert (verdict.problem.fault, verdict.problem.seq) == (Fault.HASH_MISMATCH, 3)
        assert verdict.head_seq == 2
    finally:
        await owner.execute("DELETE FROM side_effect_journal WHERE saga_id = %s", (saga_id,))
        await owner.execute(f"ALTER TABLE side_effect_journal ALTER COLUMN {column} SET NOT NULL")
