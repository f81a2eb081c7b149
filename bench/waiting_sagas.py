"""Many sagas waiting for approval at once: what one worker holds, and whether new work still flows.

Starts ``--sagas`` (default 1,000) Order sagas that each stop at the ``send_confirmation`` gate,
on one worker process (``python -m workers.saga_worker``, as deployed), then reports:

* how long until every one of them waits (its request stored);
* the worker process's resident memory (RSS) before and with them all waiting;
* the approvals inbox's first page (50 requests, live status for those only) over HTTP, from
  ``sagacity approvals serve`` as deployed: p50 and p95 of ``--requests`` fetches with all of
  them waiting, beside the same page with only 10 waiting (target: p95 under 1 s at 10,000);
* that a new saga still runs to completion, approved through the service, and how long it took.

Run from the repository root: ``python -m bench.waiting_sagas`` (embedded Postgres and in-memory
Temporal; set ``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` to use a running stack). The
waiting sagas are terminated at the end and the scratch database is dropped.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from uuid import uuid4

import httpx
import psutil
from temporalio.client import Client

from bench._support import bench_stack, machine, percentile, run, table
from sagacity.approvals import ApprovalService, InboxFilter
from sagacity.store import ApprovalStore, Pool, open_pool
from sagacity.temporal.models import SagaResult, SagaState
from sagacity.temporal.plugin import SagacityPlugin
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

#: a product of its own, stocked for every saga of the run (the example's seed stock is 10)
PRODUCT = "bench-waiting"
#: sagas waiting when the inbox's first page is measured for comparison
FEW = 10


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
    where = InboxFilter(saga_id=saga_id)
    while not (pending := (await service.inbox(where)).requests) or not pending[0].waiting:
        await asyncio.sleep(0.05)
    await service.approve(saga_id, pending[0].journal_seq, approver="bench")
    result = await handle.result()
    if result.status is not SagaState.COMPLETED:
        raise RuntimeError(f"probe saga {saga_id} ended {result.status.value}")
    return time.perf_counter() - began


def worker_mib(rss: int) -> float:
    return rss / 2**20


#: the bearer token the bench's approvals API accepts
TOKEN = "bench-token"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def first_pages(http: httpx.AsyncClient, n: int) -> tuple[list[float], dict[str, object]]:
    """Fetch the inbox's first page ``n`` times, one at a time: seconds each, and the last body."""
    times: list[float] = []
    body: dict[str, object] = {}
    for _ in range(n):
        began = time.perf_counter()
        answer = await http.get("/approvals", params={"limit": 50})
        times.append(time.perf_counter() - began)
        answer.raise_for_status()
        body = answer.json()
    return times, body


async def until_serving(http: httpx.AsyncClient, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            await http.get("/openapi.json")
            return
        except httpx.TransportError:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("sagacity approvals serve never listened") from None
            await asyncio.sleep(0.1)


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
        port = free_port()
        serve = [str(Path(sys.executable).with_name("sagacity")), "approvals", "serve"]
        with tempfile.TemporaryFile() as log:
            worker = subprocess.Popen(
                [sys.executable, "-m", "workers.saga_worker"],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            api = subprocess.Popen(
                [*serve, "--port", str(port)],
                env={**env, "SAGACITY_APPROVAL_TOKENS": f"{TOKEN}=bench"},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            try:
                async with httpx.AsyncClient(
                    base_url=f"http://127.0.0.1:{port}",
                    headers={"Authorization": f"Bearer {TOKEN}"},
                    timeout=120,
                ) as http:
                    await until_serving(http, api)
                    return await measure(
                        args, client, http, stack.database_url, task_queue, worker.pid
                    )
            except BaseException:
                log.seek(0)
                print(log.read().decode(errors="replace")[-4000:], file=sys.stderr)
                raise
            finally:
                for process in (api, worker):
                    process.terminate()
                    process.wait(timeout=60)


async def measure(
    args: argparse.Namespace,
    client: Client,
    http: httpx.AsyncClient,
    database_url: str,
    task_queue: str,
    worker_pid: int,
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

        few = min(FEW, args.sagas)
        saga_ids = await start_waiting(client, task_queue, few, args.concurrency)
        await until_waiting(approvals, saga_ids, args.timeout)
        few_s, _ = await first_pages(http, args.requests)

        began = time.perf_counter()
        saga_ids += await start_waiting(client, task_queue, args.sagas - few, args.concurrency)
        started_s = time.perf_counter() - began
        await until_waiting(approvals, saga_ids, args.timeout)
        waiting_s = time.perf_counter() - began
        rss_waiting = worker.memory_info().rss

        many_s, page = await first_pages(http, args.requests)
        shown = page.get("requests")
        waiting = sum(1 for r in shown if r.get("waiting")) if isinstance(shown, list) else 0
        probe_s = await probe(client, service, task_queue)

        print(f"\n{args.sagas:,} Order sagas waiting for approval on one worker ({machine()})\n")
        print(
            table(
                ["measure", "value"],
                [
                    ["sagas started (s)", started_s],
                    ["all waiting after (s)", waiting_s],
                    ["inbox total, as the first page reports", page.get("total")],
                    ["first page: requests waiting (live status)", waiting],
                    [f"first page, {few} waiting: p50 (s)", percentile(few_s, 50)],
                    [f"first page, {few} waiting: p95 (s)", percentile(few_s, 95)],
                    [f"first page, {args.sagas:,} waiting: p50 (s)", percentile(many_s, 50)],
                    [f"first page, {args.sagas:,} waiting: p95 (s)", percentile(many_s, 95)],
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
        return 0 if page.get("total") == args.sagas and waiting == min(50, args.sagas) else 1
    finally:
        await pool.close()
        await shop.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sagas", type=int, default=1000, help="sagas left waiting (1000)")
    parser.add_argument("--concurrency", type=int, default=50, help="starts in flight (50)")
    parser.add_argument("--timeout", type=float, default=900, help="seconds for all to wait (900)")
    parser.add_argument(
        "--requests", type=int, default=20, help="first-page fetches per measure (20)"
    )
    args = parser.parse_args()
    run(lambda: main_async(args))


if __name__ == "__main__":
    main()
