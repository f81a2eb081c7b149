"""docs/hash-rules.md cannot drift: its vectors, message and snippet are checked against the code."""

from __future__ import annotations

import ast
import json
import re
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import AsyncRawCursor

from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, canonical_bytes, entry_hash, seal

DOC = Path(__file__).parents[2] / "docs" / "hash-rules.md"


def blocks(language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", DOC.read_text("utf-8"), re.M | re.S)


def only_block(language: str) -> str:
    (block,) = blocks(language)
    return block


VECTORS: list[dict[str, Any]] = json.loads(only_block("json"))


def snippet() -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(only_block("python"), namespace)
    return namespace


def as_entry(row: dict[str, Any]) -> Entry:
    return Entry(
        saga_id=row["saga_id"],
        seq=row["seq"],
        tool_name=row["tool_name"],
        phase=Phase(row["phase"]),
        input=row["input"],
        payload=row["payload"],
        timestamp=datetime.strptime(row["timestamp"], "%Y-%m-%dT%H:%M:%S.%f%z"),
        hash=row["hash"],
    )


def test_vectors_cover_one_saga_with_non_ascii_text() -> None:
    assert len(VECTORS) >= 3
    assert len({row["saga_id"] for row in VECTORS}) == 1
    assert [row["seq"] for row in VECTORS] == list(range(1, len(VECTORS) + 1))
    assert any(not (row["input"] + row["payload"]).isascii() for row in VECTORS)


@pytest.mark.parametrize("row", VECTORS, ids=lambda row: f"seq{row['seq']}")
def test_vector_matches_the_journal_core(row: dict[str, Any]) -> None:
    entry = as_entry(row)
    assert entry_hash(row["prev_hash"], entry) == row["hash"]
    draft = Draft(entry.saga_id, entry.tool_name, entry.phase, entry.input, entry.payload)
    assert (
        seal(draft, seq=entry.seq, prev_hash=row["prev_hash"], timestamp=entry.timestamp) == entry
    )


@pytest.mark.parametrize("row", VECTORS, ids=lambda row: f"seq{row['seq']}")
def test_vector_matches_the_doc_snippet(row: dict[str, Any]) -> None:
    assert snippet()["row_hash"](row["prev_hash"], row) == row["hash"]


def test_vectors_chain_from_genesis() -> None:
    assert snippet()["GENESIS"] == GENESIS_HASH
    prevs = [GENESIS_HASH] + [row["hash"] for row in VECTORS[:-1]]
    assert [row["prev_hash"] for row in VECTORS] == prevs
    assert snippet()["first_bad_seq"](VECTORS) is None


@pytest.mark.parametrize("field", ["input", "payload", "timestamp", "phase"])
def test_doc_snippet_finds_an_edited_row(field: str) -> None:
    rows = [dict(row) for row in VECTORS]
    rows[1][field] = rows[2][field]
    assert snippet()["first_bad_seq"](rows) == 2


def test_doc_snippet_finds_a_missing_row() -> None:
    assert snippet()["first_bad_seq"](VECTORS[:1] + VECTORS[2:]) == 3


def test_printed_message_is_the_canonical_bytes() -> None:
    (message,) = [b for b in blocks("text") if b.startswith("b'sagacity-journal-v1")]
    entry = as_entry(VECTORS[0])
    assert ast.literal_eval(message.strip()) == canonical_bytes(
        GENESIS_HASH,
        entry.saga_id,
        entry.seq,
        entry.tool_name,
        entry.phase,
        entry.input,
        entry.payload,
        entry.timestamp,
    )


async def test_doc_sql_reads_back_what_the_hash_covers(database_url: str) -> None:
    """Stored in Postgres, the vectors read back through the doc's SQL still verify."""
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        for row in VECTORS:
            entry = as_entry(row)
            await conn.execute(
                "INSERT INTO side_effect_journal VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    entry.saga_id,
                    entry.seq,
                    entry.tool_name,
                    entry.phase.value,
                    entry.input,
                    entry.payload,
                    entry.timestamp.replace(tzinfo=None),  # the column holds naive UTC
                    entry.hash,
                ),
            )
        cur = AsyncRawCursor(conn)  # the doc's SQL takes $1, as psql and libpq do
        await cur.execute(only_block("sql"), (VECTORS[0]["saga_id"],))
        names = [column.name for column in cur.description or ()]
        rows = [dict(zip(names, values, strict=True)) for values in await cur.fetchall()]

    assert [row["timestamp"] for row in rows] == [row["timestamp"] for row in VECTORS]
    assert snippet()["first_bad_seq"](rows) is None
