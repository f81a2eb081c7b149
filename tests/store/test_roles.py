"""What the worker's start-up check sees: which logins can rewrite the journal."""

from __future__ import annotations

import re
from importlib.resources import files

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict

from sagacity.errors import StoreUnavailable
from sagacity.store import journal_rights, migrate
from sagacity.store.databases import with_user
from sagacity.store.roles import APPEND_ONLY_TABLES, append_only_rights


async def test_the_app_login_is_append_only(database_url: str) -> None:
    rights = await journal_rights(database_url)
    assert rights.role == "sagacity_app"
    assert rights.append_only and not rights.superuser
    assert rights.rewrites == {"UPDATE": [], "DELETE": [], "TRUNCATE": []}


def test_the_append_only_tables_are_those_the_grants_revoke_rewrites_on() -> None:
    grants = (files("sagacity.store") / "schema" / "grants.sql").read_text(encoding="utf-8")
    revoked = re.findall(r"REVOKE UPDATE, DELETE, TRUNCATE ON ([^;]+) FROM", grants)
    assert sorted(t.strip() for found in revoked for t in found.split(",")) == sorted(
        APPEND_ONLY_TABLES
    )


async def test_the_app_login_may_rewrite_no_append_only_table(database_url: str) -> None:
    rights = await append_only_rights(database_url)
    assert [r.table for r in rights] == list(APPEND_ONLY_TABLES)
    assert all(r.append_only for r in rights)


async def test_the_owner_login_can_rewrite_it(owner_database_url: str) -> None:
    rights = await journal_rights(owner_database_url)
    assert not rights.append_only
    assert rights.superuser or all(rights.owner in via for via in rights.rewrites.values())
    assert rights.role in rights.describe()


async def test_a_role_that_may_become_one_with_delete_is_not_append_only(
    owner: psycopg.AsyncConnection, owner_database_url: str
) -> None:
    # NOINHERIT: it holds DELETE only after SET ROLE sagacity_retention, which it may do
    await owner.execute(
        "DO $$ BEGIN CREATE ROLE sagacity_sneaky LOGIN NOINHERIT;"
        " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
    )
    await owner.execute("GRANT sagacity_retention TO sagacity_sneaky")
    await owner.execute("GRANT SELECT, INSERT ON side_effect_journal TO sagacity_sneaky")
    rights = await journal_rights(with_user(owner_database_url, "sagacity_sneaky"))
    assert not rights.append_only
    assert rights.rewrites["DELETE"] == ["sagacity_retention"]
    assert rights.rewrites["UPDATE"] == rights.rewrites["TRUNCATE"] == []
    assert "DELETE (as sagacity_retention)" in rights.describe()


@pytest.mark.parametrize(
    "statement",
    [
        "UPDATE side_effect_journal SET payload = 'x'",
        "DELETE FROM side_effect_journal",
        "TRUNCATE side_effect_journal",
        "UPDATE sagacity_saga_owner SET workflow_id = 'x'",
    ],
)
async def test_postgres_refuses_the_app_login_a_rewrite(database_url: str, statement: str) -> None:
    async with await psycopg.AsyncConnection.connect(database_url, autocommit=True) as conn:
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            await conn.execute(statement)


async def test_migrating_through_the_app_login_is_refused(database_url: str) -> None:
    # its own schema comes first on its search path: a migration would build a second journal
    with pytest.raises(StoreUnavailable, match="migrate as the tables' owner"):
        await migrate(database_url)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        row = await (
            await conn.execute("SELECT to_regclass('sagacity_app.side_effect_journal')")
        ).fetchone()
    assert row == (None,)


async def test_the_app_login_url_keeps_everything_but_the_login() -> None:
    assert (
        with_user("postgresql://postgres:secret@/sagacity?host=/x/postgres", "sagacity_app")
        == "postgresql://sagacity_app@/sagacity?host=/x/postgres"
    )
    conninfo = with_user("host=/tmp dbname=x user=postgres password=secret", "app")
    assert conninfo_to_dict(conninfo) == {"host": "/tmp", "dbname": "x", "user": "app"}
