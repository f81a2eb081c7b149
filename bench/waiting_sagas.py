"""Many sagas waiting for approval at once: what one worker holds, and whether new work still flows.

Starts ``--sagas`` (default 1,000) Order sagas that each stop at the ``send_confirmation`` gate,
on one worker process (``python -m workers.saga_worker``, as deployed), then reports:

* how long until every one of them waits (its request stored);
* the worker process's resident memory (RSS) before and with them all waiting;
* how long ``ApprovalService.list()`` takes (one ``status`` query per waiting saga);
* that a new saga still runs to completion, approved through the service, and how long it took.

Run from the repository root: ``python -m bench.waiting_sagas`` (embedded Postgres and in-memory
Temporal; set ``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` to use a running stack). The
waiting sagas are terminated at the end and the scratch database is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from uuid import uuid4

import psutil
from temporalio.client import Client

from bench._support import bench_stack, machine, run, table
from sagacity.approvals import ApprovalService
from sagacity.store import ApprovalStore, Pool, open_pool
from sagacity.temporal.models import SagaResult, SagaState
from sagacity.temporal.plugin import SagacityPlugin
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

#: a product of its own, stocked for every saga of the run (the example's seed stock is 10)
PRODUCT = "bench-waiting"


async def stock(pool: Pool, units: int) -> None:
    """Give :data:`PRODUCT` ``units`` available units (the shop's tables must exist)."""
    async with pool.connection() as conn:
        await conn.execute(
            "INSERT INTO inventory (product_id, name, available) VALUES (%s, 'Bench item', %s) "
            "ON CONFLICT (product_id) DO UPDATE SET available = EXCLUDED.available",
            (PRODUCT, units),
        )


async def start_waiting(client: Client, task_queue: str, n: int, concurrency: int) -> list[str]:
    """Start ``n`` Order sagas of one unit each; returns their ids (they run on by themselves)."""
    gate = asyncio.Semaphore(concurrency)
    prefix = f"waiting-{uuid4().hex[:8]}"

    async def start(i: int) -> str:
        saga_id = f"{prefix}-{i}"
        async with gate:
            await client.start_workflow(
                "order.PlaceOrder",
                OrderRequest(product_id=PRODUCT, quantity=1),
                id=saga_id,
                task_queue=task_queue,
            )
        return saga_id

    return list(await asyncio.gather(*(start(i) for i in range(n))))


async def until_waiting(approvals: ApprovalStore, saga_ids: Sequence[str], timeout: float) -> None:
    """Return once every saga has stored its approval request; TimeoutError after ``timeout``."""
    wanted = set(saga_ids)
    deadline = time.monotonic() + timeout
    while True:
        stored = {r.saga_id for r in await approvals.list()}
        if wanted <= stored:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"{len(wanted - stored)} of {len(wanted)} sagas never waited")
        await asyncio.sleep(0.5)


async def probe(client: Client, service: ApprovalService, task_queue: str) -> float:
    """Seconds for one new saga to reach its gate, be approved and complete."""
    began = time.perf_counter()
    saga_id = f"probe-{uuid4().hex[:8]}"
    handle = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(product_id=PRODUCT, quantity=1),
        id=saga_id,
        task_queue=task_queue,
        result_type=SagaResult,
    )
    while not (pending := await service.list(saga_id=saga_id)) or not pending[0].waiting:
        await asyncio.sleep(0.05)
    await service.approve(saga_id, pending[0].journal_seq, approver="bench")
    result = await handle.result()
    if result.status is not SagaState.COMPLETED:
        raise RuntimeError(f"probe saga {saga_id} ended {result.status.value}")
    return time.perf_counter() - began


def worker_mib(rss: int) -> float:
    return rss / 2**20


async def main_async(args: argparse.Namespace) -> int:
    async with bench_stack() as stack:
        task_queue = f"bench-waiting-{uuid4().hex[:8]}"
        env = {
            **os.environ,
            "SAGACITY_DATABASE_URL": stack.database_url,
            "TEMPORAL_ADDRESS": stack.temporal_address,
            "TEMPORAL_NAMESPACE": stack.temporal_namespace,
            "SAGACITY_TASK_QUEUE": task_queue,
        }
        client = await Client.connect(
            stack.temporal_address, namespace=stack.temporal_namespace, plugins=[SagacityPlugin()]
        )
        with tempfile.TemporaryFile() as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "workers.saga_worker"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                return await measure(args, client, stack.database_url, task_queue, worker.pid)
            except BaseException:
                log.seek(0)
                print(log.read().decode(errors="replace")[-4000:], file=sys.stderr)
                raise
            finally:
                worker.terminate()
                worker.wait(timeout=60)


async def measure(
    args: argparse.Namespace, client: Client, database_url: str, task_queue: str, worker_pid: int
) -> int:
    """Fill the worker with waiting sagas and print the table; 0 when every one waited."""
    shop = await Shop.open(database_url)
    pool = await open_pool(database_url, max_size=4)
    try:
        await shop.setup()
        await stock(shop.pool, args.sagas + 10)
        approvals = ApprovalStore(pool)
        service = ApprovalService(client, approvals)
        worker = psutil.Process(worker_pid)

        first_probe = await probe(client, service, task_queue)  # also waits for the worker
        rss_idle = worker.memory_info().rss

        began = time.perf_counter()
        saga_ids = await start_waiting(client, task_queue, args.sagas, args.concurrency)
        started_s = time.perf_counter() - began
        await until_waiting(approvals, saga_ids, args.timeout)
        waiting_s = time.perf_counter() - began
        rss_waiting = worker.memory_info().rss

        began = time.perf_counter()
        listed = await service.list()
        list_s = time.perf_counter() - began
        waiting = sum(1 for r in listed if r.waiting)
        probe_s = await probe(client, service, task_queue)

        print(f"\n{args.sagas:,} Order sagas waiting for approval on one worker ({machine()})\n")
        print(
            table(
                ["measure", "value"],
                [
                    ["sagas started (s)", started_s],
                    ["all waiting after (s)", waiting_s],
                    ["waiting, as list() reports", waiting],
                    ["list() with live status (s)", list_s],
                    ["worker RSS before (MiB)", worker_mib(rss_idle)],
                    ["worker RSS, all waiting (MiB)", worker_mib(rss_waiting)],
                    ["RSS per waiting saga (KiB)", (rss_waiting - rss_idle) / 1024 / args.sagas],
                    ["new saga, idle worker: start to completed (s)", first_probe],
                    ["new saga, all waiting: start to completed (s)", probe_s],
                ],
            )
        )
        gate = asyncio.Semaphore(args.concurrency)

        async def terminate(saga_id: str) -> None:
            async with gate:
                await client.get_workflow_handle(saga_id).terminate("bench over")

        await asyncio.gather(*(terminate(s) for s in saga_ids))
        return 0 if waiting == args.sagas else 1
    finally:
        await pool.close()
        await shop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sagas", type=int, default=1000, help="sagas left waiting (1000)")
    parser.add_argument("--concurrency", type=int, default=50, help="starts in flight (50)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for all to wait (900)")
    args = parser.parse_args()
    run(lambda: main_async(args))


if __name__ == "__main__":
    main()
