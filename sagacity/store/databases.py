"""Creating and dropping whole databases on a server (the dev stack, tests and benchmarks)."""

from __future__ import annotations

import contextlib
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg
from psycopg import errors, sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo


def with_database(url: str, name: str) -> str:
    """Return ``url`` pointing at database ``name`` (URL or ``key=value`` conninfo alike)."""
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        return urlunsplit(parts._replace(path="/" + quote(name, safe="")))
    return make_conninfo(url, dbname=name)


def with_user(url: str, user: str) -> str:
    """Return ``url`` logging in as ``user``, without the original login's password."""
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        host = parts.netloc.rpartition("@")[2]
        return urlunsplit(parts._replace(netloc=f"{quote(user, safe='')}@{host}"))
    params = {k: v for k, v in conninfo_to_dict(url).items() if k != "password"}
    params["user"] = user
    return make_conninfo("", **params)


async def ensure_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the server of ``server_url`` if it is missing; return its URL."""
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
        cur = await conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if await cur.fetchone() is None:
            # another process may create it between the check and here: both errors mean "exists"
            with contextlib.suppress(errors.DuplicateDatabase, errors.UniqueViolation):
                await conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return with_database(server_url, name)


async def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (if it exists), ending its open sessions first."""
    async with await psycopg.AsyncConnection.connect(server_url, autocommit=True) as conn:
        current = await (await conn.execute("SELECT current_database()")).fetchone()
        if current is not None and current[0] == name:
            raise ValueError(
                f"cannot drop {name!r} through a connection to it; use another database"
            )
        await conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )
