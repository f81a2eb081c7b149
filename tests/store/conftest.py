"""Store fixtures over the session's migrated database (``database_url``, the app login, and
``owner_database_url`` from tests/conftest.py)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import psycopg
import pytest

from sagacity.store import ApprovalStore, JournalStore, Pool, open_pool


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[Pool]:
    # 16 writers race in the concurrency test; a few more connections for the test's own reads.
    pool = await open_pool(database_url, min_size=1, max_size=20)
    yield pool
    await pool.close()


@pytest.fixture
def store(pool: Pool) -> JournalStore:
    return JournalStore(pool)


@pytest.fixture
def approvals(pool: Pool) -> ApprovalStore:
    return ApprovalStore(pool)


@pytest.fixture
async def owner(owner_database_url: str) -> AsyncIterator[psycopg.AsyncConnection]:
    """A raw connection as the tables' owner: what an attacker with database access holds."""
    async with await psycopg.AsyncConnection.connect(owner_database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture
def saga_id() -> str:
    return f"saga-{uuid.uuid4().hex[:12]}"
