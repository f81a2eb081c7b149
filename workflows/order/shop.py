"""The shop's database: the example's tables, their seed data, injected faults, and a snapshot."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import psycopg
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from sagacity.store.db import new_pool

SCHEMA = Path(__file__).with_name("schema.sql")
#: how long the shop's statements wait out a database outage
OUTAGE_S = 120.0
T = TypeVar("T")
#: the outbox row of one kind of mail about one order, sent by one saga
_SENT = "SELECT id FROM outbox WHERE order_id = %s AND kind = %s AND saga_id = %s"
SEED = {"p-1": ("Espresso grinder", 10), "p-2": ("Milk jug", 25)}


class InjectedFault(RuntimeError):
    """A failure armed with :meth:`Shop.arm_fault` (a mail relay that is down, say)."""


@dataclass(frozen=True)
class Snapshot:
    """What a person checks after a saga: stock, live reservations and orders, mail sent."""

    available: dict[str, int]
    held_reservations: int
    placed_orders: int
    outbox: int


class Shop:
    """Access to the example's tables through one connection pool."""

    def __init__(self, pool: AsyncConnectionPool[AsyncConnection[Any]]) -> None:
        self.pool = pool

    @classmethod
    async def open(cls, conninfo: str, *, max_size: int = 8, timeout: float = 30.0) -> Shop:
        """Open the pool; like the journal's, it hands out no dead connection after a restart
        and keeps reconnecting through an outage (see :func:`sagacity.store.db.new_pool`)."""
        pool: AsyncConnectionPool[AsyncConnection[Any]] = new_pool(
            conninfo, min_size=1, max_size=max_size, timeout=timeout
        )
        await pool.open(wait=True, timeout=timeout)
        return cls(pool)

    async def close(self) -> None:
        await self.pool.close()

    async def setup(self, *, reset: bool = False) -> None:
        """Create the tables (idempotent) and stock the seed products; ``reset`` empties them first."""
        async with self.pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(7243101)")
            await conn.execute(SCHEMA.read_text())
            if reset:
                await conn.execute(
                    "TRUNCATE outbox, orders, reservations, inventory, order_faults CASCADE"
                )
            for product_id, (name, available) in SEED.items():
                await conn.execute(
                    "INSERT INTO inventory (product_id, name, available) VALUES (%s, %s, %s) "
                    "ON CONFLICT (product_id) DO NOTHING",
                    (product_id, name, available),
                )

    async def arm_fault(
        self, tool_name: str, message: str, *, times: int = 1, delay_s: float = 0.0
    ) -> None:
        """Make the next ``times`` calls of ``tool_name`` fail (``-1``: all); ``delay_s`` stalls first."""
        async with self.pool.connection() as conn:
            await conn.execute(
                "INSERT INTO order_faults (tool_name, remaining, message, delay_s) "
                "VALUES (%s, %s, %s, %s) ON CONFLICT (tool_name) DO UPDATE "
                "SET remaining = EXCLUDED.remaining, message = EXCLUDED.message, "
                "delay_s = EXCLUDED.delay_s",
                (tool_name, times, message, delay_s),
            )

    async def clear_faults(self) -> None:
        async with self.pool.connection() as conn:
            await conn.execute("DELETE FROM order_faults")

    async def transact(self, work: Callable[[AsyncConnection[Any]], Awaitable[T]]) -> T:
        """Run ``work`` in one transaction, again if a database outage cut it off.

        Waits out an outage of up to :data:`OUTAGE_S`: a restart must not fail a call that would
        have worked. ``work`` must be safe to repeat (the tools look for their own row first),
        since a connection lost at commit leaves unknown whether the commit happened.
        """
        deadline = time.monotonic() + OUTAGE_S
        pause = 0.5
        while True:
            try:
                async with self.pool.connection() as conn, conn.transaction():
                    return await work(conn)
            except psycopg.OperationalError:
                if time.monotonic() + pause > deadline:
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 5.0)

    async def send_once(self, order_id: str, kind: str, body: str, saga_id: str) -> int:
        """Put the ``kind`` mail about ``order_id`` in the outbox once; its id. A try whose commit
        was cut off may have sent it: that mail is the one."""

        async def send(conn: AsyncConnection[Any]) -> int:
            row = await (await conn.execute(_SENT, (order_id, kind, saga_id))).fetchone()
            if row is None:
                made = await conn.execute(
                    "INSERT INTO outbox (order_id, kind, body, saga_id) "
                    "VALUES (%s, %s, %s, %s) RETURNING id",
                    (order_id, kind, body, saga_id),
                )
                row = await made.fetchone()
            assert row is not None
            return int(row[0])

        return await self.transact(send)

    async def sent(self, order_id: str, kind: str, saga_id: str) -> int | None:
        """The id of the ``kind`` mail about ``order_id`` in the outbox, if one was sent."""
        async with self.pool.connection() as conn:
            row = await (await conn.execute(_SENT, (order_id, kind, saga_id))).fetchone()
        return None if row is None else int(row[0])

    async def check_fault(self, tool_name: str) -> None:
        """Stall and/or raise :class:`InjectedFault` if a fault is armed for ``tool_name``."""

        async def take(conn: AsyncConnection[Any]) -> Any:
            cur = await conn.execute(
                "UPDATE order_faults SET remaining = CASE WHEN remaining > 0 THEN remaining - 1 "
                "ELSE remaining END WHERE tool_name = %s AND remaining <> 0 "
                "RETURNING message, delay_s",
                (tool_name,),
            )
            return await cur.fetchone()

        row = await self.transact(take)
        if row is None:
            return
        message, delay_s = row
        if delay_s:
            await asyncio.sleep(delay_s)
        if message:
            raise InjectedFault(message)

    async def fault_remaining(self, tool_name: str) -> int | None:
        """How many more calls the fault armed for ``tool_name`` takes (None: none armed)."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT remaining FROM order_faults WHERE tool_name = %s", (tool_name,)
            )
            row = await cur.fetchone()
        return None if row is None else int(row[0])

    async def made_by(self, saga_id: str) -> tuple[int, int]:
        """How many reservations and orders ``saga_id`` made, whatever their status now."""
        async with self.pool.connection() as conn:
            cur = await conn.execute(
                "SELECT (SELECT count(*) FROM reservations WHERE saga_id = %s), "
                "(SELECT count(*) FROM orders WHERE saga_id = %s)",
                (saga_id, saga_id),
            )
            row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])

    async def snapshot(self) -> Snapshot:
        async with self.pool.connection() as conn:
            stock = await (
                await conn.execute("SELECT product_id, available FROM inventory")
            ).fetchall()
            counts = await (
                await conn.execute(
                    "SELECT (SELECT count(*) FROM reservations WHERE status = 'held'), "
                    "(SELECT count(*) FROM orders WHERE status = 'placed'), "
                    "(SELECT count(*) FROM outbox)"
                )
            ).fetchone()
        assert counts is not None
        return Snapshot(
            available={product_id: available for product_id, available in stock},
            held_reservations=int(counts[0]),
            placed_orders=int(counts[1]),
            outbox=int(counts[2]),
        )


_current: Shop | None = None


def use(shop: Shop) -> None:
    """Make ``shop`` the one the tools act on (the worker calls this at start)."""
    global _current
    _current = shop


def current() -> Shop:
    if _current is None:
        raise RuntimeError("the order tools have no shop: call workflows.order.shop.use(...) first")
    return _current
