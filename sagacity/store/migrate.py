"""Schema migrations (``schema/NNNN_*.sql``, applied once each, in order) and the app role's grants.

Both are the tables' owner's step (``sagacity db migrate``, ``sagacity db grants``, the dev
stack's set-up), never a worker's: workers log in as the app role, which may not change the schema.
"""

from __future__ import annotations

import re
from importlib.resources import files
from typing import Any

import psycopg
from psycopg import sql

from sagacity.errors import StoreUnavailable
from sagacity.store.databases import with_user
from sagacity.store.db import translate_errors
from sagacity.store.placement import find_schema, qualified, quote_ident

_SCHEMA = files("sagacity.store") / "schema"
_MIGRATION_NAME = re.compile(r"^(\d{4}_\w+)\.sql$")
#: The role workers and commands log in as: journal INSERT and SELECT only (``schema/grants.sql``).
APP_ROLE = "sagacity_app"
# Key of the advisory lock that serializes migrators (and grants) across processes.
_LOCK_KEY = 0x5A6AC171

_VERSIONS = "sagacity_schema_version"
_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS {} (
    version     TEXT        PRIMARY KEY,
    applied_at  TIMESTAMP   NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
)
"""


def migrations() -> list[tuple[str, bytes]]:
    """Every migration shipped with Sagacity as ``(version, sql)``, oldest first."""
    found = []
    for item in _SCHEMA.iterdir():
        match = _MIGRATION_NAME.match(item.name)
        if match:
            found.append((match.group(1), item.read_bytes()))
    return sorted(found)


async def migrate(conninfo: str) -> list[str]:
    """Apply the migrations the database lacks; return their versions (``[]``: up to date).

    The tables go into the schema the journal is in, or, in a database without one, the first
    schema on this login's search path (``current_schema()``). Each migration runs with the
    search path set to that schema alone, so a script's names mean that schema's objects.
    Each runs in its own transaction under an advisory lock, and re-checks the version table
    once it holds the lock, so concurrent migrators apply each file exactly once.
    """
    applied = []
    with translate_errors("migrate the journal schema"):
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            row = await (await conn.execute("SELECT current_schema()")).fetchone()
            target = None if row is None else row[0]
            journal = await find_schema(conn)
            if target is None:
                raise StoreUnavailable(
                    "migrate the journal schema: no schema on this login's search_path exists "
                    "to create the tables in; create one, or set search_path"
                )
            if journal is not None and target != journal:
                # the app role's own schema comes first on its path: migrating as it would build
                # a second, writable journal there that its sessions would use instead
                raise StoreUnavailable(
                    f"migrate the journal schema: the journal is in schema {journal}, but this "
                    f"login would create tables in schema {target}: migrate as the tables' owner "
                    "(SAGACITY_OWNER_DATABASE_URL)"
                )
            versions = sql.SQL(qualified(target, _VERSIONS))
            for version, script in migrations():
                async with conn.transaction():
                    await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                    await _pin_search_path(conn, target)
                    await conn.execute(sql.SQL(_VERSION_TABLE).format(versions))
                    cur = await conn.execute(
                        sql.SQL("SELECT FROM {} WHERE version = %s").format(versions), (version,)
                    )
                    if await cur.fetchone() is not None:
                        continue
                    await conn.execute(script)
                    await conn.execute(
                        sql.SQL("INSERT INTO {} (version) VALUES (%s)").format(versions),
                        (version,),
                    )
                    applied.append(version)
    return applied


async def unapplied(conninfo: str) -> list[str] | None:
    """The shipped migrations this database lacks (``[]``: up to date), or None when this login
    may not read the version table (an app role granted before ``grants.sql`` gave it SELECT)."""
    with translate_errors("read the journal schema's version"):
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            schema = await find_schema(conn)
            if schema is None:
                return [version for version, _ in migrations()]
            try:
                cur = await conn.execute(
                    sql.SQL("SELECT version FROM {}").format(sql.SQL(qualified(schema, _VERSIONS)))
                )
            except psycopg.errors.UndefinedTable:
                return [version for version, _ in migrations()]
            except psycopg.errors.InsufficientPrivilege:
                return None
            applied = {row[0] for row in await cur.fetchall()}
    return [version for version, _ in migrations() if version not in applied]


async def apply_grants(conninfo: str, *, role: str = APP_ROLE, password: str | None = None) -> None:
    """Create ``role`` (LOGIN) if absent and grant it ``schema/grants.sql``.

    Run as the tables' owner, after :func:`migrate`. ``password``, when given, becomes the role's
    password (a deployment's app login over TCP needs one); otherwise it is left as it is.
    """
    template = (_SCHEMA / "grants.sql").read_text(encoding="utf-8")
    with translate_errors(f"grant the journal privileges to {role!r}"):
        async with (
            await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_catalog.pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            schema = await find_schema(conn)
            if schema is None:
                raise StoreUnavailable(
                    f"grant the journal privileges to {role!r}: there is no journal in this "
                    "database; run `sagacity db migrate` first"
                )
            await _pin_search_path(conn, schema)
            await conn.execute(
                sql.SQL(template).format(role=sql.Identifier(role), schema=sql.Identifier(schema))
            )
            if password is not None:
                # ALTER ROLE takes no bind parameters: the password goes in as a quoted literal
                await conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(role), sql.Literal(password)
                    )
                )


async def _pin_search_path(conn: psycopg.AsyncConnection[Any], schema: str) -> None:
    """Make ``schema`` the only one the rest of the transaction's names are looked up in."""
    await conn.execute(
        "SELECT pg_catalog.set_config('search_path', %s, true)", (quote_ident(schema),)
    )


async def provision(owner_conninfo: str, *, role: str = APP_ROLE) -> str:
    """The owner's set-up: migrate, grant ``role``; return ``owner_conninfo`` logging in as it.

    The URL carries no password: it suits servers that trust local logins (the embedded
    Postgres, a test server). Elsewhere give the role a password and its own URL.
    """
    await migrate(owner_conninfo)
    await apply_grants(owner_conninfo, role=role)
    return with_user(owner_conninfo, role)
