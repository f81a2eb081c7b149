"""The chaos worker's extra app: an idempotent tool with a short time limit, beside the Order app.

``book_courier`` books a courier for an order. It is declared idempotent (its booking id is
derived from the call, and a repeat updates the same row), so Temporal retries it, and it has a
time limit of :data:`COURIER_TIMEOUT_S`. ``slow_attempts`` makes its first attempts act and then
hang past that limit: the booking is made, the answer is lost, the call times out and is retried,
and after ``SagaOptions.idempotent_attempts`` such attempts it is FAILED with its effect unknown,
so the saga compensates it (``cancel_courier`` finds the booking by the call's id).

Each attempt counts itself in the booking row, so the checks can tell retries from repeats.
``undo_stall_s`` makes its undo wait before cancelling: a compensation that is running for a while
(an operator halts the saga meanwhile).

``make_note`` and ``attach_note`` carry a big value mid-saga: ``make_note`` returns a note of
``size`` characters (under the 512 KiB a result may have), and ``attach_note`` takes it six times
over (``$ref`` in a steps saga), so its argument is six times the note, beyond Temporal's 2 MiB
payload limit for a 500 kB note. Both
keep a row per call in ``chaos_notes``, ``live`` until undone.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any

from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool

from sagacity import CompensationContext, compensable, current_call
from sagacity.store.db import new_pool
from sagacity.tools import CompensableTool
from workflows.order.tools import effect_id

#: one attempt of ``book_courier`` may take this long
COURIER_TIMEOUT_S = 3.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS courier_bookings (
    id          TEXT PRIMARY KEY,
    order_id    TEXT NOT NULL,
    saga_id     TEXT NOT NULL,
    status      TEXT NOT NULL,              -- booked | cancelled
    attempts    INTEGER NOT NULL            -- attempts that reached the database
);
CREATE TABLE IF NOT EXISTS chaos_notes (
    id          TEXT PRIMARY KEY,
    saga_id     TEXT NOT NULL,
    tool        TEXT NOT NULL,
    size        INTEGER NOT NULL,
    status      TEXT NOT NULL               -- live | undone
)
"""

_pool: AsyncConnectionPool[AsyncConnection[Any]] | None = None


def _connections() -> AsyncConnectionPool[AsyncConnection[Any]]:
    if _pool is None:
        raise RuntimeError("the chaos app's lifespan has not run")
    return _pool


@compensable(by="cancel_courier", idempotent=True, timeout=timedelta(seconds=COURIER_TIMEOUT_S))
async def book_courier(
    order_id: str, slow_attempts: int = 0, undo_stall_s: float = 0.0
) -> dict[str, Any]:
    """Book a courier for the order; the first ``slow_attempts`` attempts hang after booking."""
    call = current_call()
    booking_id = effect_id("crr", call.saga_id, call.seq)
    async with _connections().connection() as conn:
        await conn.execute(
            "INSERT INTO courier_bookings (id, order_id, saga_id, status, attempts) "
            "VALUES (%s, %s, %s, 'booked', 1) "
            "ON CONFLICT (id) DO UPDATE SET attempts = courier_bookings.attempts + 1",
            (booking_id, order_id, call.saga_id),
        )
    if call.attempt <= slow_attempts:
        await asyncio.sleep(COURIER_TIMEOUT_S * 20)  # the time limit ends this attempt
    return {"booking_id": booking_id, "order_id": order_id}


async def cancel_courier(ctx: CompensationContext) -> None:
    """Cancel the booking, if the call made one (it may have failed before or after booking)."""
    await asyncio.sleep(float(ctx.input.get("undo_stall_s") or 0.0))
    booking_id = (
        str(ctx.result["booking_id"])
        if isinstance(ctx.result, dict) and "booking_id" in ctx.result
        else effect_id("crr", ctx.saga_id, ctx.seq)
    )
    async with _connections().connection() as conn:
        await conn.execute(
            "UPDATE courier_bookings SET status = 'cancelled' WHERE id = %s AND status = 'booked'",
            (booking_id,),
        )


async def _note_row(tool: str, size: int) -> str:
    call = current_call()
    note_id = effect_id("note", call.saga_id, call.seq)
    async with _connections().connection() as conn:
        await conn.execute(
            "INSERT INTO chaos_notes (id, saga_id, tool, size, status) "
            "VALUES (%s, %s, %s, %s, 'live') ON CONFLICT (id) DO NOTHING",
            (note_id, call.saga_id, tool, size),
        )
    return note_id


async def _undo_note(ctx: CompensationContext) -> None:
    async with _connections().connection() as conn:
        await conn.execute(
            "UPDATE chaos_notes SET status = 'undone' WHERE id = %s",
            (effect_id("note", ctx.saga_id, ctx.seq),),
        )


@compensable(by=_undo_note, idempotent=True)
async def make_note(size: int) -> dict[str, Any]:
    """A note of ``size`` characters, returned (a big result)."""
    return {"note_id": await _note_row("make_note", size), "note": "n" * size}


@compensable(by=_undo_note, idempotent=True)
async def attach_note(
    order_id: str, a: str, b: str, c: str, d: str, e: str, f: str
) -> dict[str, Any]:
    """Attach the six parts to the order (a big argument); returns only their size."""
    size = sum(map(len, (a, b, c, d, e, f)))
    return {"note_id": await _note_row("attach_note", size), "order_id": order_id, "size": size}


TOOLS: list[CompensableTool[..., Any]] = [book_courier, make_note, attach_note]


@asynccontextmanager
async def lifespan(database_url: str) -> AsyncIterator[None]:
    """The bookings table and a pool that, like the shop's, rides out Postgres restarts."""
    global _pool
    pool: AsyncConnectionPool[AsyncConnection[Any]] = new_pool(
        database_url, kwargs={"autocommit": True}, min_size=1, max_size=8, timeout=30.0
    )
    await pool.open(wait=True, timeout=30.0)
    try:
        async with pool.connection() as conn:
            await conn.execute("SELECT pg_advisory_lock(7243102)")
            try:
                await conn.execute(SCHEMA)
            finally:
                await conn.execute("SELECT pg_advisory_unlock(7243102)")
        _pool = pool
        yield
    finally:
        _pool = None
        await pool.close()
