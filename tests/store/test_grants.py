"""The application role: append-only on the journal, enforced by Postgres itself."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from sagacity.journal import Draft, Phase, input_hash
from sagacity.store import ApprovalRequest, ApprovalStore, JournalStore, apply_grants, open_pool


@pytest.fixture(scope="module")
async def app_url(owner_database_url: str) -> str:
    await apply_grants(owner_database_url)
    await apply_grants(owner_database_url)  # a second run changes nothing and does not fail
    return make_conninfo(owner_database_url, user="sagacity_app")


@pytest.fixture
async def app_conn(app_url: str) -> AsyncIterator[psycopg.AsyncConnection]:
    async with await psycopg.AsyncConnection.connect(app_url, autocommit=True) as conn:
        yield conn


async def test_app_role_appends_and_reads(app_url: str, saga_id: str) -> None:
    async with await JournalStore.open(app_url) as store:
        first = await store.append(Draft(saga_id, "pay", Phase.INTENT, "{}"))
        assert await store.read(saga_id) == [first]
        assert (await store.verify(saga_id)).ok


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE side_effect_journal SET payload = 'x' WHERE saga_id = %s",
        "DELETE FROM side_effect_journal WHERE saga_id = %s",
        "TRUNCATE side_effect_journal",
    ],
)
async def test_app_role_cannot_rewrite_the_journal(
    store: JournalStore, app_conn: psycopg.AsyncConnection, saga_id: str, statement: str
) -> None:
    row = await store.append(Draft(saga_id, "pay", Phase.INTENT, "{}"))
    params = (saga_id,) if "%s" in statement else None
    with pytest.raises(psycopg.errors.InsufficientPrivilege):
        await app_conn.execute(statement, params)
    assert await store.read(saga_id) == [row]


async def test_app_role_manages_approval_requests(app_url: str, saga_id: str) -> None:
    pool = await open_pool(app_url)
    try:
        approvals = ApprovalStore(pool)
        req = ApprovalRequest(saga_id, 3, "wire", "{}", input_hash("{}"), datetime.now(UTC))
        await approvals.put(req)
        await approvals.put(req)
        assert await approvals.get(saga_id, 3) == req
        assert await approvals.delete(saga_id, 3)
    finally:
        await pool.close()


async def test_grants_can_set_the_roles_password(owner_database_url: str) -> None:
    # a role of this test's own: the shared sagacity_app keeps whatever it has
    role = "sagacity_pw_check"
    await apply_grants(owner_database_url, role=role, password="s3cret'; --")
    async with await psycopg.AsyncConnection.connect(owner_database_url) as conn:
        cur = await conn.execute(
            "SELECT rolcanlogin, rolpassword IS NOT NULL FROM pg_authid WHERE rolname = %s",
            (role,),
        )
        assert await cur.fetchone() == (True, True)
