"""One saga of many calls (20,000 by default) that completes them, then compensates them all.

Shows that a saga of any length stays within Temporal's history limits: the workflow continues
as new whenever history grows past ``SagaOptions.continue_as_new_events`` (or Temporal suggests
it), carrying its head and effects, and the journal's seq goes on across runs. Reports the time
per phase, the runs, history events per run, and checks the journal (gap-free, chain verified,
every call compensated once).

    python -m bench.long_saga --calls 20000
"""

from __future__ import annotations

import argparse
import time
from collections import Counter
from collections.abc import Sequence
from datetime import timedelta
from uuid import uuid4

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from bench._support import BenchStack, bench_stack, machine, positive, run, table
from bench.overhead_workload import TOOLS, tool_name

with workflow.unsafe.imports_passed_through():
    from sagacity.errors import NoEffect
    from sagacity.store import ApprovalStore, JournalStore, open_pool
    from sagacity.temporal.models import SagaCarry, SagaOptions, SagaResult, SagaState
    from sagacity.temporal.plugin import SagacityPlugin
    from sagacity.temporal.saga import Saga
    from sagacity.tools import CompensationContext, compensable

WORKFLOW = "bench.LongSaga"


class LongSagaRequest(BaseModel):
    calls: int
    options: SagaOptions = Field(default_factory=SagaOptions)
    #: where a previous run stopped (continue-as-new)
    done: int = 0
    carry: SagaCarry | None = None


async def _nothing_to_undo(ctx: CompensationContext) -> None:
    """It failed without effect, so this never runs."""


@compensable(name="bench_refuse", by=_nothing_to_undo)
async def refuse() -> None:
    """The last step: says no without any effect, so the saga compensates every call."""
    raise NoEffect("the long saga ends by refusing")


@workflow.defn(name=WORKFLOW)
class LongSaga:
    """``calls`` trivial calls in one saga, then a refusal: every call is compensated."""

    @workflow.run
    async def run(self, request: LongSagaRequest) -> SagaResult:
        saga = Saga(request.options, carry=request.carry)

        def go_on(done: int, carry: SagaCarry) -> None:
            workflow.continue_as_new(request.model_copy(update={"done": done, "carry": carry}))

        async def body() -> None:
            for n in range(request.done, request.calls):
                if n > request.done and saga.continue_as_new_suggested():
                    go_on(n, saga.carry())
                await saga.call(tool_name(1), n=n)
            await saga.call("bench_refuse")

        return await saga.run(body, continue_as_new=lambda carry: go_on(request.calls, carry))


async def run_chain(client: Client, workflow_id: str) -> list[tuple[int, int]]:
    """History events and bytes of each run of the chain, first run first."""
    sizes: list[tuple[int, int]] = []
    handle = client.get_workflow_handle(workflow_id)
    first = (await handle.describe()).raw_description.workflow_execution_info
    run_id: str | None = first.first_run_id or None
    while run_id:
        this_run = client.get_workflow_handle(workflow_id, run_id=run_id)
        info = (await this_run.describe()).raw_description.workflow_execution_info
        next_run: str | None = None
        async for event in this_run.fetch_history_events():
            if event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs = event.workflow_execution_continued_as_new_event_attributes
                next_run = attrs.new_execution_run_id
        sizes.append((info.history_length, info.history_size_bytes))
        run_id = next_run
    return sizes


async def measure(stack: BenchStack, args: argparse.Namespace) -> int:
    settings = stack.settings
    pool = await open_pool(
        stack.database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
    )
    journal = JournalStore(pool)
    plugin = SagacityPlugin(
        journal=journal,
        approvals=ApprovalStore(pool),
        tools=[*TOOLS, refuse],
        workflows=[LongSaga],
    )
    client = await Client.connect(
        stack.temporal_address, namespace=stack.temporal_namespace, plugins=[plugin]
    )
    task_queue = f"bench-long-{uuid4().hex[:8]}"
    wid = f"bench-long-{uuid4().hex[:12]}"
    try:
        async with Worker(client, task_queue=task_queue):
            began = time.perf_counter()
            handle = await client.start_workflow(
                WORKFLOW,
                LongSagaRequest(
                    calls=args.calls,
                    options=SagaOptions(continue_as_new_events=args.events),
                ),
                id=wid,
                task_queue=task_queue,
                result_type=SagaResult,
                execution_timeout=timedelta(hours=6),
            )
            result = await handle.result()
            total_s = time.perf_counter() - began
        rows = await journal.read(wid)
        verdict = await journal.verify(wid)
        sizes = await run_chain(client, wid)
    finally:
        await journal.close()
        await pool.close()

    phases = Counter(r.phase.value for r in rows)
    failed_at = next(r.timestamp for r in rows if r.phase.value == "FAILED")
    forward_s = (failed_at - rows[0].timestamp).total_seconds()
    back_s = (rows[-1].timestamp - failed_at).total_seconds()
    print(f"\n# One saga of {args.calls:,} calls, then compensated")
    print(f"machine: {machine()}")
    print(f"Postgres: {stack.postgres_origin}; Temporal: {stack.temporal_origin}")
    print(f"continue as new after {args.events:,} history events\n")
    events = sorted(e for e, _ in sizes)
    kib = sorted(b / 1024 for _, b in sizes)
    print(table(
        ["outcome", "runs", "events/run max", "events/run median", "history KiB/run max",
         "journal rows", "calls/s forward", "compensations/s", "total s"],
        [[result.status.value, len(sizes), events[-1], events[len(events) // 2], kib[-1],
          len(rows), args.calls / forward_s, phases["COMPENSATED"] / back_s, total_s]],
    ))  # fmt: skip
    ok = (
        result.status is SagaState.COMPENSATED
        and verdict.ok
        and [r.seq for r in rows] == list(range(1, len(rows) + 1))
        and phases["EXECUTED"] == args.calls
        and phases["COMPENSATED"] == args.calls
    )
    print(f"\njournal: {dict(phases)}; chain verified: {verdict.ok}; every call undone once: {ok}")
    return 0 if ok else 1


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.long_saga", description=__doc__)
    parser.add_argument("--calls", type=positive, default=20_000, help="calls (20,000)")
    parser.add_argument(
        "--events", type=positive, default=10_000, help="continue as new after (10,000 events)"
    )
    return parser.parse_args(argv)


async def main() -> int:
    args = parse()
    async with bench_stack() as stack:
        return await measure(stack, args)


if __name__ == "__main__":
    run(main)
