"""Where Sagacity's tables are: the schema the owner migrated them into, named in every statement.

Sagacity's statements never rely on a session's ``search_path``. The application role has a
schema of its own, first on its search path, where it may create tables: a statement naming
``side_effect_journal`` bare would write a copy the role made there (a *shadow*) instead of the
journal. So every statement text is a template naming each table (and the halt gate's function)
in braces, ``{side_effect_journal}``, filled once per schema with the qualified name
(:func:`qualify`); the schema is found once per pool (:func:`pool_schema`).

Built-in functions the application role's sessions call are named ``pg_catalog.f`` wherever a
function of its own could match the arguments more exactly than the built-in does (a
polymorphic or variadic one, or an integer parameter psycopg sends as ``smallint``): function
lookup prefers an exact match anywhere on the search path, so ``hashtextextended(text,
smallint)`` made in its own schema would replace the built-in in the compensation lock.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from weakref import WeakKeyDictionary

import psycopg

from sagacity.errors import StoreUnavailable

if TYPE_CHECKING:
    from sagacity.store.db import Pool

__all__ = [
    "FUNCTIONS",
    "JOURNAL",
    "TABLES",
    "Candidate",
    "find_schema",
    "pool_schema",
    "qualified",
    "qualify",
    "quote_ident",
    "remember",
]

JOURNAL = "side_effect_journal"
#: Every table the migrations create, all in one schema (the migrations' own table included).
TABLES = (
    JOURNAL,
    "sagacity_approval_request",
    "sagacity_saga_owner",
    "sagacity_tlog_leaf",
    "sagacity_tlog_node",
    "sagacity_conversation",
    "sagacity_halt",
    "sagacity_halt_gate",
    "sagacity_schema_version",
)
#: The functions the migrations create beside them.
FUNCTIONS = ("sagacity_halted",)

# Every relation named like the journal, whatever its kind (a view can stand in for a table),
# but temporary ones (seen only by the session that made them, whose statements name the
# schema anyway), with whether this login could have made it itself (it belongs to a role the login is or may
# become, or lies in a schema the login may create in) and whether the login owns it.
_CANDIDATES = """
SELECT n.nspname, pg_get_userbyid(c.relowner),
       pg_has_role(c.relowner, 'MEMBER') OR has_schema_privilege(n.oid, 'CREATE'),
       c.relowner = (SELECT oid FROM pg_catalog.pg_roles WHERE rolname = current_user)
FROM pg_catalog.pg_class c JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
WHERE c.relname = %s AND c.relkind IN ('r', 'p', 'v', 'm', 'f') AND c.relpersistence <> 't'
ORDER BY n.nspname
"""


def quote_ident(name: str) -> str:
    """``name`` as a Postgres identifier in double quotes (a quote inside is doubled)."""
    return '"' + name.replace('"', '""') + '"'


def qualified(schema: str, name: str) -> str:
    """``name`` in ``schema``, quoted: ``"public"."side_effect_journal"``."""
    return f"{quote_ident(schema)}.{quote_ident(name)}"


@functools.cache
def qualify(template: str, schema: str) -> str:
    """``template`` with each ``{table}`` (and ``{function}``) filled in as named in ``schema``.

    Cached: a store's statement texts are built once per schema and are the same string objects
    from then on, so the hot path pays a dictionary lookup, never string building.
    """
    return template.format_map({name: qualified(schema, name) for name in TABLES + FUNCTIONS})


@dataclass(frozen=True, slots=True)
class Candidate:
    """A relation named like the journal: in which schema, whose, and whether this login could
    have made it itself (then it cannot be trusted to be the one the owner migrated)."""

    schema: str
    owner: str
    own_making: bool
    #: the login owns it: the tables' owner's login finds its own tables this way
    mine: bool


async def candidates(conn: psycopg.AsyncConnection[Any]) -> list[Candidate]:
    """Every relation named like the journal that the connected login can see, by schema."""
    cur = await conn.execute(_CANDIDATES, (JOURNAL,))
    return [Candidate(str(s), str(o), bool(m), bool(i)) for s, o, m, i in await cur.fetchall()]


async def find_schema(conn: psycopg.AsyncConnection[Any]) -> str | None:
    """The schema the journal was migrated into, as the connected login finds it; None: none.

    One relation named ``side_effect_journal`` decides it. With several, the one this login
    could not have made itself (another role's, in a schema it may not create in) is the
    journal: an application role's shadow is its own, in its own schema. Failing that, the one
    this login owns: the tables' owner's login (a shadow is the application role's, so the
    owner's ``sagacity halt`` still works while one exists). When neither singles one out,
    :class:`StoreUnavailable` names them all: a shadow is dropped, never guessed around.
    """
    found = await candidates(conn)
    if len(found) <= 1:
        return found[0].schema if found else None
    for chosen in ([c for c in found if not c.own_making], [c for c in found if c.mine]):
        if len(chosen) == 1:
            return chosen[0].schema
    listed = ", ".join(f"{qualified(c.schema, JOURNAL)} (owned by {c.owner})" for c in found)
    raise StoreUnavailable(
        f"{JOURNAL} is in more than one schema: {listed}; this login cannot tell which one the "
        "tables' owner migrated, and will not guess. All but one are shadows: as the shadow's "
        "owner or a superuser, DROP TABLE each one that is not the journal"
    )


_SCHEMAS: WeakKeyDictionary[Pool, str] = WeakKeyDictionary()


async def pool_schema(pool: Pool, conn: psycopg.AsyncConnection[Any]) -> str:
    """The journal's schema for ``pool``, found through ``conn`` (one of its connections) the
    first time and remembered for the pool's life; :class:`StoreUnavailable` when the database
    is not migrated."""
    schema = _SCHEMAS.get(pool)
    if schema is None:
        found = await find_schema(conn)
        if found is None:
            raise StoreUnavailable(
                f"there is no {JOURNAL} table in this database: run `sagacity db migrate` first"
            )
        _SCHEMAS[pool] = schema = found
    return schema


def remember(pool: Pool, schema: str) -> None:
    """Record ``pool``'s schema, found when it opened (:func:`sagacity.store.db.open_pool`)."""
    _SCHEMAS[pool] = schema
