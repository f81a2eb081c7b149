"""Connections to the journal database, and psycopg errors translated into Sagacity's own."""

from __future__ import annotations

import select
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, TypeAlias

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import ConnStatus
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from sagacity.errors import InvalidEntry, InvalidInput, StoreUnavailable
from sagacity.journal import utc_micros
from sagacity.store.placement import find_schema, remember

#: The pool type every store takes: plain async connections returning tuples.
Pool: TypeAlias = AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]


async def open_pool(
    conninfo: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0
) -> Pool:
    """Open a pool of autocommit connections; :class:`StoreUnavailable` if the server is unreachable.

    One direct connection is tried first: the pool itself only reports a timeout, while a direct
    attempt says why (refused, bad password, no such database) and fails at once; it also finds
    the schema the journal is in, which every store on the pool names in its statements
    (:mod:`sagacity.store.placement`). The pool is a :func:`new_pool`: it survives Postgres
    restarts and outages.
    """
    with translate_errors("connect to the journal database"):
        probe = await psycopg.AsyncConnection.connect(
            conninfo, connect_timeout=max(1, int(timeout))
        )
        try:
            schema = await find_schema(probe)
        finally:
            await probe.close()
        pool = new_pool(
            conninfo,
            kwargs={"autocommit": True},
            min_size=min_size,
            max_size=max_size,
            timeout=timeout,
        )
        await pool.open(wait=True, timeout=timeout)
    if schema is not None:  # else not migrated yet: the stores look on first use
        remember(pool, schema)
    return pool


#: How long the pool retries one lost connection (after 1 s, 2 s, 4 s, ...) before it starts over.
#: psycopg_pool's default, 5 minutes, lets that backoff grow to minutes: after a long outage the
#: pool would try again only minutes after the server was back, its callers timing out meanwhile.
RECONNECT_WINDOW_S = 5.0


def new_pool(
    conninfo: str,
    *,
    kwargs: dict[str, Any] | None = None,
    min_size: int = 1,
    max_size: int = 10,
    timeout: float = 10.0,
) -> Pool:
    """A pool, not yet opened, that outlives Postgres restarts and outages of any length.

    * A connection is checked before it is handed out (``check``): after a restart the pool's
      idle connections are all dead, and without the check each caller would get one and fail.
      The first dead one found makes the pool check all its idle ones at once; else it would find
      them one by one, pausing longer before each (1 s, 2 s, 4 s, ...) until callers time out.
    * A connection that breaks while in use is closed when it comes back, never pooled again
      (psycopg_pool does this itself; the outage tests check it).
    * Lost connections are retried within :data:`RECONNECT_WINDOW_S`, and then again from the
      start (``reconnect_failed``): by default the pool retries for 5 minutes with a backoff
      that grows to minutes, then gives up until a new request comes.

    ``timeout`` is how long a request waits for a connection before ``PoolTimeout`` (an
    ``OperationalError``, so :func:`translate_errors` makes it :class:`StoreUnavailable`).
    """
    pool: Pool

    async def check(conn: psycopg.AsyncConnection[TupleRow]) -> None:
        if _quiet(conn):
            return
        try:
            await AsyncConnectionPool.check_connection(conn)
        except psycopg.Error:
            if not pool.closed:
                await pool.check()  # drops every dead idle connection and starts replacing it
            raise

    async def start_over(failed: AsyncConnectionPool[Any]) -> None:
        if not failed.closed:
            await failed.check()  # also lets the pool grow again: a new attempt, at once

    pool = AsyncConnectionPool(
        conninfo,
        kwargs=kwargs,
        min_size=min_size,
        max_size=max_size,
        timeout=timeout,
        check=check,
        reconnect_timeout=RECONNECT_WINDOW_S,
        reconnect_failed=start_over,
        open=False,
    )
    return pool


def keepalives_off(conninfo: str) -> bool:
    """True when ``conninfo`` turns TCP keepalives off (``keepalives=0``).

    Then a connection whose server vanished without closing it never becomes readable, so
    :func:`new_pool`'s check takes it for alive. :class:`InvalidInput` if it does not parse.
    """
    try:
        options = conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as exc:
        raise InvalidInput(f"the database URL does not parse: {exc}") from None
    except UnicodeEncodeError:  # bytes of the environment that are not UTF-8
        raise InvalidInput("the database URL is not UTF-8 text") from None
    return str(options.get("keepalives", "1")).strip() == "0"


def _quiet(conn: psycopg.AsyncConnection[TupleRow]) -> bool:
    """An idle connection in good state with nothing to read is alive: no round trip needed.

    A server that stops or restarts closes its connections (or sends a termination notice
    first), which makes the idle socket readable; only then does the pool pay for a query.
    """
    pgconn = conn.pgconn
    if pgconn.status != ConnStatus.OK:
        return False
    try:
        readable, _, _ = select.select([pgconn.socket], [], [], 0)
    except (OSError, ValueError, psycopg.OperationalError):
        return False
    return not readable


@contextmanager
def translate_errors(action: str) -> Iterator[None]:
    """Re-raise psycopg errors met while doing ``action`` as :mod:`sagacity.errors` types.

    Values the database refuses become :class:`InvalidEntry`; anything else (unreachable server,
    missing tables, missing privileges) is :class:`StoreUnavailable`: the caller cannot fix it by
    changing the call.
    """
    try:
        yield
    except (psycopg.DataError, psycopg.IntegrityError) as exc:
        raise InvalidEntry(f"{action}: the database refused the values: {exc}") from exc
    except psycopg.errors.UndefinedTable as exc:
        raise StoreUnavailable(f"{action}: {exc}; run `sagacity db migrate` first") from exc
    except psycopg.Error as exc:
        raise StoreUnavailable(f"{action}: {type(exc).__name__}: {exc}") from exc


def unreachable(exc: StoreUnavailable) -> bool:
    """Whether ``exc`` says connecting failed or the connection was lost (the server down,
    restarting or refusing the login; no connection for the pool to give): an outage, which
    waiting may outlast; not a statement refused by a server that answers (tables missing,
    privileges lacking), which waiting does not change."""
    return isinstance(exc.__cause__, psycopg.OperationalError)


def naive_utc(ts: datetime) -> datetime:
    """``ts`` as the naive UTC value a ``TIMESTAMP`` column holds (naive input is taken as UTC).

    An aware value would be sent as ``timestamptz`` and shifted by the session time zone.
    """
    return utc_micros(ts).replace(tzinfo=None)
