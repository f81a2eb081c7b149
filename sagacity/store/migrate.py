"""Schema migrations (``schema/NNNN_*.sql``, applied once each, in order) and the app role's grants.

Both are the tables' owner's step (``sagacity db migrate``, ``sagacity db grants``, the dev
stack's set-up), never a worker's: workers log in as the app role, which may not change the schema.
"""

from __future__ import annotations

import re
from importlib.resources import files

import psycopg
from psycopg import sql

from sagacity.errors import StoreUnavailable
from sagacity.store.databases import with_user
from sagacity.store.db import translate_errors

_SCHEMA = files("sagacity.store") / "schema"
_MIGRATION_NAME = re.compile(r"^(\d{4}_\w+)\.sql$")
#: The role workers and commands log in as: journal INSERT and SELECT only (``schema/grants.sql``).
APP_ROLE = "sagacity_app"
# Key of the advisory lock that serializes migrators (and grants) across processes.
_LOCK_KEY = 0x5A6AC171

_VERSION_TABLE = """
CREATE TABLE IF NOT EXISTS sagacity_schema_version (
    version     TEXT        PRIMARY KEY,
    applied_at  TIMESTAMP   NOT NULL DEFAULT (now() AT TIME ZONE 'UTC')
)
"""


# Where this login would create tables, and where the journal already is on its search path.
_WHERE = """
SELECT current_schema(),
       (SELECT n.nspname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE c.relname = 'side_effect_journal' AND n.nspname = ANY (current_schemas(false))
        ORDER BY array_position(current_schemas(false), n.nspname) LIMIT 1)
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

    Each migration runs in its own transaction under an advisory lock, and re-checks the version
    table once it holds the lock, so concurrent migrators apply each file exactly once.
    """
    applied = []
    with translate_errors("migrate the journal schema"):
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            target, journal = await (await conn.execute(_WHERE)).fetchone() or (None, None)
            if journal is not None and target != journal:
                # the app role's own schema comes first on its path: migrating as it would build
                # a second, writable journal there that its sessions would use instead
                raise StoreUnavailable(
                    f"migrate the journal schema: the journal is in schema {journal}, but this "
                    f"login would create tables in schema {target}: migrate as the tables' owner "
                    "(SAGACITY_OWNER_DATABASE_URL)"
                )
            for version, script in migrations():
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
                    await conn.execute(_VERSION_TABLE)
                    cur = await conn.execute(
                        "SELECT FROM sagacity_schema_version WHERE version = %s", (version,)
                    )
                    if await cur.fetchone() is not None:
                        continue
                    await conn.execute(script)
                    await conn.execute(
                        "INSERT INTO sagacity_schema_version (version) VALUES (%s)", (version,)
                    )
                    applied.append(version)
    return applied


async def unapplied(conninfo: str) -> list[str] | None:
    """The shipped migrations this database lacks (``[]``: up to date), or None when this login
    may not read the version table (an app role granted before ``grants.sql`` gave it SELECT)."""
    with translate_errors("read the journal schema's version"):
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            try:
                cur = await conn.execute("SELECT version FROM sagacity_schema_version")
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
    script = sql.SQL(template).format(role=sql.Identifier(role))
    with translate_errors(f"grant the journal privileges to {role!r}"):
        async with (
            await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn,
            conn.transaction(),
        ):
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            await conn.execute(script)
            if password is not None:
                # ALTER ROLE takes no bind parameters: the password goes in as a quoted literal
                await conn.execute(
                    sql.SQL("ALTER ROLE {} PASSWORD {}").format(
                        sql.Identifier(role), sql.Literal(password)
                    )
                )


async def provision(owner_conninfo: str, *, role: str = APP_ROLE) -> str:
    """The owner's set-up: migrate, grant ``role``; return ``owner_conninfo`` logging in as it.

    The URL carries no password: it suits servers that trust local logins (the embedded
    Postgres, a test server). Elsewhere give the role a password and its own URL.
    """
    await migrate(owner_conninfo)
    await apply_grants(owner_conninfo, role=role)
    return with_user(owner_conninfo, role)
