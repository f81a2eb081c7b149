"""Migrations: the spec's schema, applied once however many migrators run."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from sagacity.errors import StoreUnavailable
from sagacity.store import JournalStore, migrate
from sagacity.store.migrate import migrations


@pytest.fixture
async def empty_database(
    owner: psycopg.AsyncConnection, owner_database_url: str
) -> AsyncIterator[str]:
    name = f"sagacity_migrate_{uuid.uuid4().hex[:10]}"
    await owner.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(owner_database_url, dbname=name)
    await owner.execute(f"DROP DATABASE {name} WITH (FORCE)")


async def test_migrate_is_idempotent(owner_database_url: str) -> None:
    assert await migrate(owner_database_url) == []


async def test_concurrent_migrators_apply_each_file_once(empty_database: str) -> None:
    results = await asyncio.gather(*(migrate(empty_database) for _ in range(6)))
    versions = [v for v, _ in migrations()]
    # migrators may split the files between them; each file is applied exactly once
    assert sorted(v for applied in results for v in applied) == versions
    async with await psycopg.AsyncConnection.connect(empty_database) as conn:
        cur = await conn.execute("SELECT version FROM sagacity_schema_version ORDER BY version")
        assert [v for (v,) in await cur.fetchall()] == versions


async def test_store_on_unmigrated_database_says_to_migrate(empty_database: str) -> None:
    async with await JournalStore.open(empty_database) as store:
        with pytest.raises(StoreUnavailable, match="sagacity db migrate"):
            await store.head("any")


async def test_schema_is_the_spec(owner: psycopg.AsyncConnection) -> None:
    cur = await owner.execute(
        "SELECT table_name, column_name, data_type, character_maximum_length, is_nullable,"
        " column_default FROM information_schema.columns"
        " WHERE table_name IN ('side_effect_journal', 'sagacity_approval_request')"
        " ORDER BY table_name, ordinal_position"
    )
    columns = [(t, c, d, n, null, default) for t, c, d, n, null, default in await cur.fetchall()]
    text, stamp, big = "text", "timestamp without time zone", "bigint"
    assert columns == [
        ("sagacity_approval_request", "saga_id", text, None, "NO", None),
        ("sagacity_approval_request", "journal_seq", big, None, "NO", None),
        ("sagacity_approval_request", "tool_name", text, None, "NO", None),
        ("sagacity_approval_request", "input", text, None, "NO", "''::text"),
        ("sagacity_approval_request", "input_hash", "character", 64, "NO", None),
        ("sagacity_approval_request", "created_at", stamp, None, "NO", None),
        # beyond the spec: the deadline the inbox shows without asking the saga (0006)
        ("sagacity_approval_request", "expires_at", stamp, None, "YES", None),
        # beyond the spec: the escalation past a request's SLA, working state like the rest (0010)
        ("sagacity_approval_request", "escalated_at", stamp, None, "YES", None),
        ("sagacity_approval_request", "escalated_to", text, None, "YES", None),
        ("sagacity_approval_request", "escalation_state", text, None, "YES", None),
        ("sagacity_approval_request", "escalation_attempts", "integer", None, "NO", "0"),
        ("sagacity_approval_request", "escalation_error", text, None, "YES", None),
        ("side_effect_journal", "saga_id", text, None, "NO", None),
        ("side_effect_journal", "seq", big, None, "NO", None),
        ("side_effect_journal", "tool_name", text, None, "NO", None),
        ("side_effect_journal", "phase", text, None, "NO", None),
        ("side_effect_journal", "input", text, None, "NO", "''::text"),
        ("side_effect_journal", "payload", text, None, "NO", "''::text"),
        ("side_effect_journal", "timestamp", stamp, None, "NO", None),
        ("side_effect_journal", "hash", "character", 64, "NO", None),
    ]
    cur = await owner.execute(
        "SELECT indexname, indexdef FROM pg_indexes"
        " WHERE tablename IN ('side_effect_journal', 'sagacity_approval_request')"
        " ORDER BY indexname"
    )
    indexes: dict[str, str] = dict(await cur.fetchall())
    assert indexes["idx_journal_saga_id"].endswith("USING btree (saga_id)")
    assert indexes["side_effect_journal_pkey"].endswith("USING btree (saga_id, seq)")
    assert indexes["sagacity_approval_request_pkey"].endswith("USING btree (saga_id, journal_seq)")
