"""The cost of the halt gate: guarded vs unguarded INTENT throughput, and how long a halt waits.

Writers on their own connections append single INTENT rows (each a new saga) for a few
seconds, first naming no task queue, then naming one (since schema 0009 the journal's trigger
checks both against the gate), in the same run and database. Then, with writers running, a
halt of an unrelated tool is timed (its exclusive gate lock must get in between the shared
ones), and the gate row's multixact use is read.

    python -m bench.halt_gate postgresql://postgres@127.0.0.1:5432/postgres [writers] [seconds]

A scratch database is made and dropped. Prints one JSON object; asserts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import uuid

from sagacity.errors import Halted
from sagacity.journal import Draft, Phase
from sagacity.store import JournalStore, open_pool
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.store.migrate import provision


async def _rate(journal: JournalStore, writers: int, seconds: float, guarded: bool) -> float:
    stop = asyncio.Event()
    done = [0]

    async def one() -> None:
        while not stop.is_set():
            with contextlib.suppress(Halted):
                await journal.append_at(
                    Draft(f"b-{uuid.uuid4().hex}", "t", Phase.INTENT, "{}"),
                    seq=1,
                    prev_hash=None,
                    exclusive=True,
                    task_queue="bench" if guarded else None,
                )
                done[0] += 1

    tasks = [asyncio.create_task(one()) for _ in range(writers)]
    await asyncio.sleep(seconds)
    stop.set()
    await asyncio.gather(*tasks)
    return done[0] / seconds


async def main(admin_url: str, writers: int, seconds: float) -> None:
    name = f"halt_bench_{uuid.uuid4().hex[:8]}"
    owner = await ensure_database(admin_url, name)
    try:
        app = await provision(owner)
        journal = await JournalStore.open(app, max_size=writers)
        owner_pool = await open_pool(owner, max_size=2)
        try:
            out: dict[str, object] = {"writers": writers, "seconds": seconds}
            unguarded = await _rate(journal, writers, seconds, False)
            guarded = await _rate(journal, writers, seconds, True)
            out["unguarded_per_s"], out["guarded_per_s"] = round(unguarded), round(guarded)
            out["guarded_over_unguarded"] = round(guarded / max(unguarded, 1.0), 3)
            # a halt while guarded writers run
            load = asyncio.create_task(_rate(journal, writers, seconds, True))
            await asyncio.sleep(seconds / 3)
            loop = asyncio.get_running_loop()
            start = loop.time()
            await HaltStore(owner_pool).halt(
                kind="halt",
                scope=HaltScope(tool="unrelated"),
                policy="keep",
                reason="bench",
                operator="bench",
                signature=None,
            )
            out["halt_wait_s"] = round(loop.time() - start, 3)
            await load
            async with owner_pool.connection() as conn:
                cur = await conn.execute(
                    "SELECT mxid_age(datminmxid), pg_size_pretty(pg_relation_size("
                    "'sagacity_halt_gate')) FROM pg_database WHERE datname = current_database()"
                )
                row = await cur.fetchone()
            assert row is not None
            out["multixact_age"], out["gate_table_size"] = row[0], row[1]
            print(json.dumps(out))
        finally:
            await journal.close()
            await owner_pool.close()
    finally:
        await drop_database(admin_url, name)


if __name__ == "__main__":
    asyncio.run(
        main(
            sys.argv[1],
            int(sys.argv[2]) if len(sys.argv) > 2 else 40,
            float(sys.argv[3]) if len(sys.argv) > 3 else 5.0,
        )
    )
