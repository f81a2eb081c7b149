"""Who may rewrite the journal: the check a worker makes at start, and ``sagacity doctor``'s.

The journal is append-only by permission only when the role that writes it cannot UPDATE, DELETE
or TRUNCATE it. A role can, if it holds the privilege itself or through a role it inherits, if it
can ``SET ROLE`` to a role that does (the owner, ``sagacity_retention``), or if it is a superuser
(who bypasses every grant). The same holds for every table ``schema/grants.sql`` makes
append-only (:data:`APPEND_ONLY_TABLES`).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg

from sagacity.store.db import translate_errors

__all__ = [
    "APPEND_ONLY_TABLES",
    "JOURNAL",
    "JournalRights",
    "append_only_rights",
    "journal_rights",
]

#: The statements that change or remove journal rows; an append-only writer holds none of them.
REWRITES = ("UPDATE", "DELETE", "TRUNCATE")

JOURNAL = "side_effect_journal"
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

    @property
    def append_only(self) -> bool:
        """True when the role can neither rewrite nor remove a journal row."""
        return not self.superuser and not any(self.rewrites.values())

    def describe(self) -> str:
        """One line saying what the role may do and through which role."""
        if self.superuser:
            return (
                f"role {self.role} is a superuser: it may UPDATE, DELETE and TRUNCATE {self.table}"
            )
        held = [f"{what} (as {', '.join(via)})" for what, via in self.rewrites.items() if via]
        owns = f", owned by {self.owner}" if self.owner != self.role else " (it owns the table)"
        return f"role {self.role} may {', '.join(held)} on {self.table}{owns}"


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
            for table in tables:
                row = await (await conn.execute(_RIGHTS, (table,))).fetchone()
                assert row is not None  # the ::regclass cast raises when the table is missing
                role, superuser, owner, *held = row
                rewrites = dict(zip(REWRITES, held, strict=True))
                found.append(JournalRights(role, bool(superuser), owner, rewrites, table))
    return found
