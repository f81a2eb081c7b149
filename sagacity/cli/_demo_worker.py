"""The worker app of the demo's second act, served by ``sagacity worker`` processes the demo kills.

Its one tool of its own, ``reserve_stock``, is the Order example's ``reserve_inventory`` declared
idempotent, which it is: the reservation's id is derived from the saga id and the call's INTENT
seq, and the reservation is looked for before one is made, so running the call again reserves
nothing more (and the id's primary key refuses a second one). Having reserved, it waits at a pause
the demo arms once, which is where the demo kills the worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from sagacity import CompensableTool, compensable
from workflows.order.lifespan import lifespan
from workflows.order.shop import InjectedFault, current
from workflows.order.tools import OutOfStock, create_order, release_inventory, reserve_inventory

__all__ = ["PAUSE", "TOOLS", "lifespan"]

#: the shop fault name the demo arms with a delay: the stall after the reservation is made
PAUSE = "reserve_stock"


@compensable(
    by=release_inventory,
    idempotent=True,
    # a killed worker is noticed within seconds, and the call retried on another
    heartbeat_timeout=timedelta(seconds=2),
    no_effect_on=(InjectedFault, OutOfStock),
)
async def reserve_stock(product_id: str, quantity: int) -> dict[str, Any]:
    """Reserve inventory for a product; running it again for the same call reserves nothing more."""
    reserved = await reserve_inventory.fn(product_id, quantity)
    await current().check_fault(PAUSE)
    return reserved


TOOLS: list[CompensableTool[..., Any]] = [reserve_stock, create_order]
