"""Halts in tests: every test that halts lifts what it left in force, or later tests' sagas hold."""

from __future__ import annotations

from sagacity.store import open_pool
from sagacity.store.halts import HaltStore


async def lift_all(owner_database_url: str) -> None:
    """Lift every halt in force (as the tables' owner)."""
    pool = await open_pool(owner_database_url)
    try:
        store = HaltStore(pool)
        for halt in await store.list(active=True):
            await store.lift(halt.id, by="tests", reason="test ended", signature=None)
    finally:
        await pool.close()
