"""The canonical example's tools: reserve stock, create the order, email the confirmation.

``reserve_inventory`` and ``create_order`` are REVERSIBLE; ``send_confirmation`` is
IRREVERSIBLE (an email cannot be unsent), so a human approves each one before it goes out.
Compensations are idempotent: undoing twice changes nothing the second time.

Each effect's id is derived from the call (saga id and INTENT seq), so a compensation can find
what a call did even when the call failed and left no result (``ctx.failed``). Injected faults
and a lack of stock happen before anything is written, so the tools declare them
``no_effect_on``: such a failure needs no undo. Statements run through ``Shop.transact``, which
waits out a database restart and tries again; each try first looks for the row an earlier one
may have committed, so a statement cut off by an outage neither fails the call nor repeats it.

Each tool has a probe, which ``sagacity reconcile`` runs: it looks for the call's row (by the
same id) and finds the effect there while it is live (a held reservation, a placed order, a
confirmation in the outbox), answering with what the tool would have returned.
"""

from __future__ import annotations

import hashlib
from typing import Any

from psycopg import AsyncConnection

from sagacity import (
    CompensableTool,
    CompensationContext,
    Found,
    ProbeContext,
    Reversibility,
    compensable,
    current_call,
)
from workflows.order.shop import InjectedFault, current


class OutOfStock(RuntimeError):
    """Fewer units are available than were asked for."""


def effect_id(prefix: str, saga_id: str, seq: int) -> str:
    """The id of the row a call creates: the same for the call and for its compensation."""
    return f"{prefix}-{hashlib.sha256(f'{saga_id}:{seq}'.encode()).hexdigest()[:12]}"


async def _look(query: str, *params: Any) -> tuple[Any, ...] | None:
    """The first row ``query`` finds in the shop, for the probes (which only read)."""
    async with current().pool.connection() as conn:
        row: tuple[Any, ...] | None = await (await conn.execute(query, params)).fetchone()
    return row


def _undo_id(prefix: str, field: str, ctx: CompensationContext | ProbeContext) -> str:
    if isinstance(ctx.result, dict) and field in ctx.result:
        return str(ctx.result[field])
    return effect_id(prefix, ctx.saga_id, ctx.seq)


@compensable(by="release_inventory", no_effect_on=(InjectedFault, OutOfStock))
async def reserve_inventory(product_id: str, quantity: int) -> dict[str, Any]:
    """Reserve inventory for a product."""
    shop = current()
    await shop.check_fault("reserve_inventory")
    call = current_call()
    reservation_id = effect_id("res", call.saga_id, call.seq)

    async def reserve(conn: AsyncConnection[Any]) -> None:
        done = await conn.execute("SELECT FROM reservations WHERE id = %s", (reservation_id,))
        if await done.fetchone() is not None:
            return  # an earlier try committed before its connection was lost
        cur = await conn.execute(
            "UPDATE inventory SET available = available - %s "
            "WHERE product_id = %s AND available >= %s RETURNING available",
            (quantity, product_id, quantity),
        )
        if await cur.fetchone() is None:
            raise OutOfStock(f"cannot reserve {quantity} of {product_id!r}")
        await conn.execute(
            "INSERT INTO reservations (id, product_id, quantity, status, saga_id) "
            "VALUES (%s, %s, %s, 'held', %s)",
            (reservation_id, product_id, quantity, call.saga_id),
        )

    await shop.transact(reserve)
    return {"reservation_id": reservation_id, "product_id": product_id, "quantity": quantity}


async def release_inventory(ctx: CompensationContext) -> None:
    """Give the reserved units back (once, however often it is called)."""
    shop = current()
    await shop.check_fault("release_inventory")

    async def release(conn: AsyncConnection[Any]) -> None:
        cur = await conn.execute(
            "UPDATE reservations SET status = 'released' WHERE id = %s AND status = 'held' "
            "RETURNING product_id, quantity",
            (_undo_id("res", "reservation_id", ctx),),
        )
        row = await cur.fetchone()
        if row is not None:
            await conn.execute(
                "UPDATE inventory SET available = available + %s WHERE product_id = %s",
                (row[1], row[0]),
            )

    await shop.transact(release)


@reserve_inventory.probe
async def reservation_held(ctx: ProbeContext) -> Found | bool:
    """The reservation exists while it is held."""
    reservation_id = _undo_id("res", "reservation_id", ctx)
    row = await _look(
        "SELECT product_id, quantity FROM reservations WHERE id = %s AND status = 'held'",
        reservation_id,
    )
    if row is None:
        return False
    return Found({"reservation_id": reservation_id, "product_id": row[0], "quantity": row[1]})


@compensable(by="cancel_order", no_effect_on=(InjectedFault,))
async def create_order(
    product_id: str, quantity: int, reservation_id: str | None = None
) -> dict[str, Any]:
    """Create the customer order."""
    shop = current()
    await shop.check_fault("create_order")
    call = current_call()
    order_id = effect_id("ord", call.saga_id, call.seq)

    async def place(conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            "INSERT INTO orders (id, product_id, quantity, reservation_id, status, saga_id) "
            "VALUES (%s, %s, %s, %s, 'placed', %s) ON CONFLICT (id) DO NOTHING",
            (order_id, product_id, quantity, reservation_id, call.saga_id),
        )

    await shop.transact(place)
    return {"order_id": order_id, "product_id": product_id, "quantity": quantity}


async def cancel_order(ctx: CompensationContext) -> None:
    """Cancel the order (once, however often it is called)."""
    shop = current()
    await shop.check_fault("cancel_order")

    async def cancel(conn: AsyncConnection[Any]) -> None:
        await conn.execute(
            "UPDATE orders SET status = 'cancelled' WHERE id = %s AND status = 'placed'",
            (_undo_id("ord", "order_id", ctx),),
        )

    await shop.transact(cancel)


@create_order.probe
async def order_placed(ctx: ProbeContext) -> Found | bool:
    """The order exists while it is placed (not cancelled)."""
    order_id = _undo_id("ord", "order_id", ctx)
    row = await _look(
        "SELECT product_id, quantity FROM orders WHERE id = %s AND status = 'placed'", order_id
    )
    if row is None:
        return False
    return Found({"order_id": order_id, "product_id": row[0], "quantity": row[1]})


@compensable(reversibility=Reversibility.IRREVERSIBLE, no_effect_on=(InjectedFault,))
async def send_confirmation(order_id: str) -> dict[str, Any]:
    """Email the customer an order confirmation."""
    shop = current()
    await shop.check_fault("send_confirmation")
    saga_id = current_call().saga_id

    body = f"Your order {order_id} is confirmed."
    message_id = await shop.send_once(order_id, "confirmation", body, saga_id)
    return {"message_id": message_id, "order_id": order_id}


@send_confirmation.probe
async def confirmation_sent(ctx: ProbeContext) -> Found | bool:
    """The confirmation exists once it is in the outbox."""
    order_id = ctx.input.get("order_id")
    message_id = await current().sent(str(order_id), "confirmation", ctx.saga_id)
    return False if message_id is None else Found({"message_id": message_id, "order_id": order_id})


TOOLS: list[CompensableTool[..., Any]] = [reserve_inventory, create_order, send_confirmation]
