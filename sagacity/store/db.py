"""Connections to the journal database, and psycopg errors translated into Sagacity's own."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import TypeAlias

import psycopg
from psycopg.rows import TupleRow
from psycopg_pool import AsyncConnectionPool

from sagacity.errors import InvalidEntry, StoreUnavailable
from sagacity.journal import utc_micros

#: The pool type every store takes: plain async connections returning tuples.
Pool: TypeAlias = AsyncConnectionPool[psycopg.AsyncConnection[TupleRow]]


async def open_pool(
    conninfo: str, *, min_size: int = 1, max_size: int = 10, timeout: float = 10.0
) -> Pool:
    """Open a pool of autocommit connections; :class:`StoreUnavailable` if the server is unreachable.

    One direct connection is tried first: the pool itself only reports a timeout, while a direct
    attempt says why (refused, bad password, no such database) and fails at once.
    """
    with translate_errors("connect to the journal database"):
        probe = await psycopg.AsyncConnection.connect(
            conninfo, connect_timeout=max(1, int(timeout))
        )
        await probe.close()
        pool = AsyncConnectionPool(
            conninfo,
            min_size=min_size,
            max_size=max_size,
            kwargs={"autocommit": True},
            timeout=timeout,
            open=False,
        )
        await pool.open(wait=True, timeout=timeout)
    return pool


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


def naive_utc(ts: datetime) -> datetime:
    """``ts`` as the naive UTC value a ``TIMESTAMP`` column holds (naive input is taken as UTC).

    An aware value would be sent as ``timestamptz`` and shifted by the session time zone.
    """
    return utc_micros(ts).replace(tzinfo=None)
