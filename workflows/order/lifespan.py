"""What a worker serving the Order tools sets up around itself: the shop's tables and pool."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from workflows.order.shop import Shop, use


@asynccontextmanager
async def lifespan(database_url: str) -> AsyncIterator[Shop]:
    shop = await Shop.open(database_url)
    try:
        await shop.setup()
        use(shop)
        yield shop
    finally:
        await shop.close()
