"""docs/hash-rules.md is enough: a verifier written from its rules alone reproduces stored hashes.

The verifier below shares no code with Sagacity. It reads rows with a plain ``SELECT *`` (the
timestamp as Postgres prints it, not the doc's ``to_char``) and applies the document's rules for
the points a stranger once had to guess: empty input and payload, non-ASCII text, the printed
timestamp, the case of stored hashes, the previous hash after a gap, approval rows, and phases
Sagacity never writes. Rows come from a real Order saga on Temporal (with its approval) and from
rows sealed by the journal core, cut by the table's owner.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any, cast

import psycopg
import pytest
from psycopg.types.string import TextLoader
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, entry_hash, seal, verify_rows
from sagacity.store import JournalStore
from sagacity.temporal.models import Decision, SagaResult, SagaState
from tests.temporal import conftest as saga_fixtures
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.workflows import OrderRequest

# the Order saga's fixtures: the journal, the shop, an in-process worker
pool = saga_fixtures.pool
journal = saga_fixtures.journal
approvals = saga_fixtures.approvals
shop_session = saga_fixtures.shop_session
shop = saga_fixtures.shop
worker = saga_fixtures.worker

# --- the independent verifier: docs/hash-rules.md, nothing else ------------------------------

ZEROS = "0" * 64  # "for seq 1, 64 zeros"
TAG = b"sagacity-journal-v1\n"  # the domain tag and its newline


def netstring(text: str) -> bytes:
    """``<length in bytes>:<UTF-8 bytes>,``; an empty field is ``0:,``."""
    data = text.encode("utf-8")
    return str(len(data)).encode("ascii") + b":" + data + b","


def hashed_timestamp(printed: str) -> str:
    """A plain SELECT's ``2026-01-02 03:04:05.12`` as the hashed ``2026-01-02T03:04:05.120000Z``.

    The rule: the space becomes ``T``, the fraction (absent when zero, trailing zeros dropped)
    is padded to six digits, ``Z`` follows.
    """
    day, clock = printed.split(" ")
    whole, _, fraction = clock.partition(".")
    return f"{day}T{whole}.{fraction.ljust(6, '0')}Z"


def row_hash(previous: str, row: dict[str, Any]) -> str:
    fields = [
        previous,
        row["saga_id"],
        str(row["seq"]),
        row["tool_name"],
        row["phase"],
        row["input"],
        row["payload"],
        hashed_timestamp(row["timestamp"]),
    ]
    return hashlib.sha256(TAG + b"".join(netstring(f) for f in fields)).hexdigest()


def check(rows: list[dict[str, Any]]) -> dict[int, bool | None]:
    """Per seq: does the stored hash match? None: row seq-1 is missing, so it cannot be known.

    "Previous hash" is the stored ``hash`` of row ``seq - 1`` of the same saga, as stored.
    """
    stored = {row["seq"]: row["hash"] for row in rows}
    found: dict[int, bool | None] = {}
    for row in rows:
        previous = ZEROS if row["seq"] == 1 else stored.get(row["seq"] - 1)
        found[row["seq"]] = None if previous is None else row_hash(previous, row) == row["hash"]
    return found


# --- the journal, written by Sagacity and read with plain SQL ---------------------------------


@pytest.fixture
async def plain(owner_database_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    """The table owner's connection; timestamps come back as the text Postgres prints."""
    async with await psycopg.AsyncConnection.connect(owner_database_url, autocommit=True) as conn:
        conn.adapters.register_loader("timestamp", TextLoader)
        yield conn


async def select(conn: psycopg.AsyncConnection[Any], saga_id: str) -> list[dict[str, Any]]:
    cur = await conn.execute(
        "SELECT * FROM side_effect_journal WHERE saga_id = %s ORDER BY seq", (saga_id,)
    )
    names = [column.name for column in cur.description or ()]
    return [dict(zip(names, values, strict=True)) for values in await cur.fetchall()]


async def insert(conn: psycopg.AsyncConnection[Any], entry: Entry) -> None:
    await conn.execute(
        "INSERT INTO side_effect_journal VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
        (
            entry.saga_id,
            entry.seq,
            entry.tool_name,
            str(entry.phase),
            entry.input,
            entry.payload,
            entry.timestamp.replace(tzinfo=None),  # the column holds naive UTC
            entry.hash,
        ),
    )


async def test_an_order_saga_with_its_approval_rehashes_from_plain_select(
    temporal_client: Client, worker: Worker, journal: JournalStore, plain: Any
) -> None:
    saga_id = f"order-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=saga_id,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    waiting = await wait_for(handle, awaiting_approval)
    assert waiting.pending_approval is not None
    seq = waiting.pending_approval.journal_seq
    decision = Decision(journal_seq=seq, approver="renée", approve=True)
    assert await handle.execute_update("decide", decision, result_type=str) == "approved"
    assert (await handle.result()).status is SagaState.COMPLETED

    rows = await select(plain, saga_id)

    assert set(check(rows).values()) == {True}
    by_seq = {row["seq"]: row for row in rows}
    asked, decided = by_seq[seq], by_seq[seq + 1]
    # the document's approval rows: the call's own name, its input, an empty payload; then the
    # decision under approval-gate, repeating that input, with the approver
    assert (asked["phase"], asked["tool_name"], asked["payload"]) == (
        "AWAITING_APPROVAL",
        "send_confirmation",
        "",
    )
    assert (decided["phase"], decided["tool_name"]) == ("APPROVED", "approval-gate")
    assert decided["input"] == asked["input"] != ""
    assert decided["payload"] == "approver=renée"
    # INTENT rows carry no payload: the empty field
    assert {r["payload"] for r in rows if r["phase"] == "INTENT"} == {""}


async def test_sealed_rows_with_edge_cases_and_a_gap_rehash_as_the_document_says(
    journal: JournalStore, plain: Any
) -> None:
    saga_id = f"rules-{uuid.uuid4().hex[:8]}"
    drafts = [
        # nothing to hash in input or payload
        (Draft(saga_id, "ping", Phase.INTENT), datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)),
        # non-ASCII: precomposed and combining forms, an emoji, CJK; a fraction with zeros
        (
            Draft(
                saga_id, "ping", Phase.EXECUTED, '{"to":"Zoë"}', '{"memo":"Zoe\u0308 ☕ 東京 🎉"}'
            ),
            datetime(2026, 1, 2, 3, 4, 5, 120000, tzinfo=UTC),
        ),
        (Draft(saga_id, "ping", Phase.COMPENSATED, "", "{}"), datetime(2026, 1, 2, 3, 4, 6, 40)),
        (Draft(saga_id, "ping", Phase.FAILED, "[]", ""), datetime(999, 12, 31, 23, 59, 59, 999999)),
        (Draft(saga_id, "ping", Phase.EXECUTED, "{}", "ok"), datetime(2026, 1, 3, 0, 0, 0, 1)),
    ]
    previous = GENESIS_HASH
    for seq, (draft, at) in enumerate(drafts, start=1):
        entry = seal(draft, seq=seq, prev_hash=previous, timestamp=at)
        await insert(plain, entry)
        previous = entry.hash

    rows = await select(plain, saga_id)
    assert [r["timestamp"] for r in rows][:4] == [
        "2026-01-02 03:04:05",
        "2026-01-02 03:04:05.12",
        "2026-01-02 03:04:06.00004",
        "0999-12-31 23:59:59.999999",
    ]
    assert set(check(rows).values()) == {True}

    # the owner deletes row 3: row 4 cannot be checked (its previous hash is gone), row 5
    # still hashes over row 4's stored hash; both verifiers name the gap at seq 4
    await plain.execute(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq = 3", (saga_id,)
    )
    rows = await select(plain, saga_id)
    assert check(rows) == {1: True, 2: True, 4: None, 5: True}
    verdict = await journal.verify(saga_id)
    assert verdict.problem is not None and (verdict.problem.seq, verdict.problem.fault) == (
        4,
        "gap",
    )

    # a stored hash in capitals is not the digest: the row fails, in both verifiers
    await plain.execute(
        "UPDATE side_effect_journal SET hash = upper(hash) WHERE saga_id = %s AND seq = 2",
        (saga_id,),
    )
    rows = await select(plain, saga_id)
    assert check(rows)[2] is False
    verdict = await journal.verify(saga_id)
    assert verdict.problem is not None and (verdict.problem.seq, verdict.problem.fault) == (
        2,
        "hash_mismatch",
    )


def test_a_phase_sagacity_never_writes_is_hashed_as_stored_and_the_chain_does_not_judge_it() -> (
    None
):
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    sealed = seal(Draft("odd", "t", Phase.INTENT), seq=1, prev_hash=GENESIS_HASH, timestamp=at)
    odd = replace(sealed, phase=cast(Phase, "intent"), hash="")
    odd = replace(odd, hash=entry_hash(GENESIS_HASH, odd))
    row = {
        "saga_id": "odd",
        "seq": 1,
        "tool_name": "t",
        "phase": "intent",
        "input": "",
        "payload": "",
        "timestamp": "2026-01-02 03:04:05",
        "hash": odd.hash,
    }
    assert check([row]) == {1: True} and odd.hash != sealed.hash
    assert verify_rows("odd", [odd]).ok
