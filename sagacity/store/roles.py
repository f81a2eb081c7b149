"""Who may rewrite the journal: the check a worker makes at start, and ``sagacity doctor``'s.

The journal is append-only by permission only when the role that writes it cannot UPDATE, DELETE
or TRUNCATE it. A role can, if it holds the privilege itself or through a role it inherits, if it
can ``SET ROLE`` to a role that does (the owner, ``sagacity_retention``), or if it is a superuser
(who bypasses every grant). The same holds for every table ``schema/grants.sql`` makes
append-only (:data:`APPEND_ONLY_TABLES`), each checked where the statements write it: in the
journal's schema (:mod:`sagacity.store.placement`).

And the role must not be able to lead anyone to another table: :func:`placement` finds the
objects named like Sagacity's outside the journal's schema that the role made, or that come
before the journal's schema on its search path (a *shadow*: a tool naming the table bare reads
that one), and the roles it may act as that may create objects in the journal's schema.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from sagacity.errors import StoreUnavailable
from sagacity.store.db import translate_errors
from sagacity.store.placement import (
    FUNCTIONS,
    JOURNAL,
    TABLES,
    find_schema,
    qualified,
    quote_ident,
)

__all__ = [
    "APPEND_ONLY_TABLES",
    "JOURNAL",
    "JournalRights",
    "Placement",
    "Shadow",
    "append_only_rights",
    "journal_rights",
    "placement",
]

#: The statements that change or remove journal rows; an append-only writer holds none of them.
REWRITES = ("UPDATE", "DELETE", "TRUNCATE")

#: The tables ``schema/grants.sql`` revokes REWRITES on from the application role.
APPEND_ONLY_TABLES = (
    JOURNAL,
    "sagacity_saga_owner",
    "sagacity_tlog_leaf",
    "sagacity_tlog_node",
    "sagacity_conversation",
    # the worker only reads halts: one that could lift them would defeat the kill switch
    "sagacity_halt",
    "sagacity_halt_gate",
)

# One row: the session's role, whether it is a superuser, and, for each of REWRITES, the roles
# it is or may become that hold that privilege on the table (the table's owner always may: it
# can grant itself anything it revoked).
_RIGHTS = """
SELECT current_user,
       (SELECT rolsuper FROM pg_roles WHERE rolname = current_user),
       pg_get_userbyid(c.relowner),
       array(SELECT r.rolname FROM pg_roles r
             WHERE pg_has_role(current_user, r.oid, 'MEMBER')
               AND (r.oid = c.relowner OR has_table_privilege(r.oid, c.oid, 'UPDATE'))
             ORDER BY r.rolname),
       array(SELECT r.rolname FROM pg_roles r
             WHERE pg_has_role(current_user, r.oid, 'MEMBER')
               AND (r.oid = c.relowner OR has_table_privilege(r.oid, c.oid, 'DELETE'))
             ORDER BY r.rolname),
       array(SELECT r.rolname FROM pg_roles r
             WHERE pg_has_role(current_user, r.oid, 'MEMBER')
               AND (r.oid = c.relowner OR has_table_privilege(r.oid, c.oid, 'TRUNCATE'))
             ORDER BY r.rolname)
FROM pg_class c
WHERE c.oid = %s::regclass
"""


@dataclass(frozen=True, slots=True)
class JournalRights:
    """What the connected role may do to journal rows beyond INSERT and SELECT."""

    role: str
    superuser: bool
    owner: str
    #: statement -> the roles (this one, or one it may become) that hold it; empty: refused
    rewrites: dict[str, list[str]]
    table: str = JOURNAL
    #: the schema the table is in: the one Sagacity's statements name
    schema: str = "public"

    @property
    def append_only(self) -> bool:
        """True when the role can neither rewrite nor remove a journal row."""
        return not self.superuser and not any(self.rewrites.values())

    def describe(self) -> str:
        """One line saying what the role may do and through which role."""
        where = f"{self.schema}.{self.table}"
        if self.superuser:
            return f"role {self.role} is a superuser: it may UPDATE, DELETE and TRUNCATE {where}"
        held = [f"{what} (as {', '.join(via)})" for what, via in self.rewrites.items() if via]
        owns = f", owned by {self.owner}" if self.owner != self.role else " (it owns the table)"
        return f"role {self.role} may {', '.join(held)} on {where}{owns}"


async def journal_rights(conninfo: str) -> JournalRights:
    """What the role ``conninfo`` logs in as may do to the journal table."""
    (rights,) = await append_only_rights(conninfo, (JOURNAL,))
    return rights


async def append_only_rights(
    conninfo: str, tables: tuple[str, ...] = APPEND_ONLY_TABLES
) -> list[JournalRights]:
    """What the role ``conninfo`` logs in as may do to each of ``tables``, in that order."""
    found = []
    with translate_errors("check the append-only tables' privileges"):
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            schema = await _journal_schema(conn)
            for table in tables:
                cur = await conn.execute(_RIGHTS, (qualified(schema, table),))
                row = await cur.fetchone()
                assert row is not None  # the ::regclass cast raises when the table is missing
                role, superuser, owner, *held = row
                rewrites = dict(zip(REWRITES, held, strict=True))
                found.append(JournalRights(role, bool(superuser), owner, rewrites, table, schema))
    return found


async def _journal_schema(conn: psycopg.AsyncConnection[Any]) -> str:
    schema = await find_schema(conn)
    if schema is None:
        raise StoreUnavailable(f"there is no {JOURNAL} table: run `sagacity db migrate` first")
    return schema


# Objects named like Sagacity's tables and functions outside the journal's schema that this
# login made (it is, or may become, their owner) or that come before the journal's schema on
# its search path: (qualified name, what DROP takes, owner). Temporary ones are left out: only
# the session that made one sees it, and it ends with that session.
_SHADOWS = """
WITH path AS (SELECT current_schemas(false) AS p), ahead AS (
    SELECT n.oid FROM pg_namespace n, path
    WHERE pg_catalog.array_position(p, n.nspname)
          < COALESCE(pg_catalog.array_position(p, %(schema)s::name), 2147483647)
)
SELECT pg_catalog.format('%%I.%%I', n.nspname, c.relname),
       CASE c.relkind WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                      WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END,
       pg_get_userbyid(c.relowner)
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = ANY (%(tables)s) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
  AND n.nspname <> %(schema)s AND c.relpersistence <> 't'
  AND (pg_has_role(c.relowner, 'MEMBER') OR n.oid IN (SELECT oid FROM ahead))
UNION ALL
SELECT pg_catalog.format('%%I.%%I(%%s)', n.nspname, p.proname,
                 pg_get_function_identity_arguments(p.oid)),
       CASE p.prokind WHEN 'f' THEN 'FUNCTION' ELSE 'ROUTINE' END,
       pg_get_userbyid(p.proowner)
FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
WHERE p.proname = ANY (%(functions)s) AND n.nspname <> %(schema)s
  AND n.oid <> pg_my_temp_schema() AND NOT pg_is_other_temp_schema(n.oid)
  AND (pg_has_role(p.proowner, 'MEMBER') OR n.oid IN (SELECT oid FROM ahead))
ORDER BY 1
"""

# The roles this login is or may become that may create objects in the journal's schema.
_CREATORS = """
SELECT array(SELECT r.rolname FROM pg_roles r
             WHERE pg_has_role(current_user, r.oid, 'MEMBER')
               AND has_schema_privilege(r.oid, n.oid, 'CREATE')
             ORDER BY r.rolname)
FROM pg_namespace n WHERE n.nspname = %s
"""


@dataclass(frozen=True, slots=True)
class Shadow:
    """An object named like one of Sagacity's, outside the journal's schema."""

    #: schema-qualified, as DROP takes it (a function with its argument types)
    name: str
    #: TABLE, VIEW, FUNCTION, ...
    kind: str
    owner: str

    def drop(self) -> str:
        """The statement that removes it (run as its owner or a superuser)."""
        return f"DROP {self.kind} {self.name}"


@dataclass(frozen=True, slots=True)
class Placement:
    """Where the journal is for a login, and what could stand in for it."""

    role: str
    #: the schema Sagacity's statements name
    schema: str
    #: the roles this login is or may become that may create objects in ``schema``
    creators: list[str]
    shadows: list[Shadow]

    def describe(self) -> list[str]:
        """One sentence per problem, with its fix; empty when there is none."""
        problems = [
            f"{s.kind.lower()} {s.name} (owned by {s.owner}) is named like one of Sagacity's, "
            f"outside the journal's schema {self.schema}: a shadow that a session naming it "
            f"bare reads or writes instead; drop it as its owner: {s.drop()}"
            for s in self.shadows
        ]
        if self.creators:
            problems.append(
                f"role {self.role} may create objects in the journal's schema {self.schema} "
                f"(as {', '.join(self.creators)}): a table it made there before a migration "
                f"creates it would be its own; as the schema's owner, REVOKE CREATE ON SCHEMA "
                f"{quote_ident(self.schema)} FROM PUBLIC, {quote_ident(self.role)}"
            )
        return problems


async def placement(conninfo: str) -> Placement:
    """Where the journal is for the role ``conninfo`` logs in as, and what could shadow it."""
    with translate_errors("check where the journal is"):
        async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as conn:
            schema = await _journal_schema(conn)
            cur = await conn.execute(
                _SHADOWS,
                {"schema": schema, "tables": list(TABLES), "functions": list(FUNCTIONS)},
            )
            shadows = [Shadow(*row) for row in await cur.fetchall()]
            row = await (await conn.execute(_CREATORS, (schema,))).fetchone()
            role = await (await conn.execute("SELECT current_user")).fetchone()
    assert row is not None and role is not None  # the schema was just found
    return Placement(str(role[0]), schema, list(row[0]), shadows)
