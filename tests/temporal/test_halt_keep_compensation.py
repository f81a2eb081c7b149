"""A ``keep`` halt freezes compensations too, those already under way included.

A saga fails and compensates three effects, newest first. The halt lands while the first undo
runs (its tool code cannot be stopped part-way: it finishes and is journaled, and the halt's
report names it ``compensating`` rather than live and untouched), or while the first undo waits
to be retried. Either way no later undo runs and no COMPENSATED row is written until the halt is
lifted; the saga shows itself held by that halt, then compensates to the end.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta

import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity import CompensationContext, compensable
from sagacity.approvals.halts import HaltService
from sagacity.errors import NoEffect
from sagacity.journal import Phase
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, SagaStatus, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.halts import lift_all
from tests.temporal.conftest import serving, wait_for

#: the keys whose undo ran to its end, in order
UNDONE: list[str] = []
#: set when the undo of that key starts
STARTED: dict[str, asyncio.Event] = {}
#: the undo of that key waits for this before it returns
RELEASE: dict[str, asyncio.Event] = {}
#: how many more times the undo of that key fails
FAILS: dict[str, int] = {}


async def unplace(ctx: CompensationContext) -> None:
    key = str(ctx.input["key"])
    if key in STARTED:
        STARTED[key].set()
    if FAILS.get(key, 0) > 0:
        FAILS[key] -= 1
        raise RuntimeError(f"the undo of {key} failed, try again")
    if key in RELEASE:
        await RELEASE[key].wait()
    UNDONE.append(key)


@compensable(by=unplace)
async def place(key: str) -> str:
    """Place a thing."""
    return key


@compensable(by=unplace)
async def refuse() -> None:
    """Fail, having done nothing."""
    raise NoEffect("refused upstream")


@pytest.fixture
async def halt_service(
    temporal_client: Client, owner_database_url: str
) -> AsyncIterator[HaltService]:
    """Halts as an operator writes them (the tables' owner), lifted again after the test."""
    pool = await open_pool(owner_database_url, max_size=2)
    try:
        yield HaltService(temporal_client, HaltStore(pool), JournalStore(pool))
    finally:
        await pool.close()
        await lift_all(owner_database_url)


async def compensated(journal: JournalStore, saga_id: str) -> list[str]:
    """The input of each COMPENSATED row, in journal order."""
    return [r.input for r in await journal.read(saga_id) if r.phase is Phase.COMPENSATED]


def held_by(halt_id: int) -> Callable[[SagaStatus], bool]:
    def held(status: SagaStatus) -> bool:
        return (
            status.state is SagaState.HALTED
            and status.halted is not None
            and status.halted.halt_id == halt_id
        )

    return held


async def start(client: Client, task_queue: str) -> WorkflowHandle[object, SagaResult]:
    """A saga that places a, b and c, then fails: its compensations run for c, b, a."""
    return await client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[
                *(Step(tool="place", args={"key": k}, id=k) for k in "abc"),
                Step(tool="refuse"),
            ],
            options=SagaOptions(compensation_backoff_s=2.0),
        ),
        id=f"keep-undo-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )


@pytest.fixture(autouse=True)
def _fresh() -> None:
    UNDONE.clear()
    STARTED.clear()
    RELEASE.clear()
    FAILS.clear()
    STARTED["c"] = asyncio.Event()


@pytest.mark.parametrize("landing", ["mid_undo", "before_a_retry"])
async def test_a_keep_halt_holds_compensations_already_under_way(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    halt_service: HaltService,
    landing: str,
) -> None:
    if landing == "mid_undo":
        RELEASE["c"] = asyncio.Event()
    else:
        FAILS["c"] = 1  # the first attempt fails; the halt lands while the retry waits
    async with serving(
        temporal_client, task_queue, journal=journal, approvals=approvals, tools=[place, refuse]
    ):
        handle = await start(temporal_client, task_queue)
        await asyncio.wait_for(STARTED["c"].wait(), 30)
        result = await halt_service.halt(
            scope=HaltScope(sagas=(handle.id,)),
            policy="keep",
            reason="freeze it",
            operator="olivia",
            settle=timedelta(seconds=1),
        )
        reported = {e.seq: e.state for e in result.report.live}
        if landing == "mid_undo":
            # the undo under way is named as such, not as an effect the halt keeps in place
            assert reported == {1: "executed", 3: "executed", 5: "compensating"}
            RELEASE["c"].set()  # its code runs to the end, and is journaled
            undone, still_executed = ["c"], ["a"]
        else:
            assert reported == {1: "executed", 3: "executed", 5: "executed"}
            undone, still_executed = [], ["a", "b"]

        await wait_for(handle, held_by(result.halt_id), timeout=30)
        await asyncio.sleep(3)  # a retry's backoff (2 s) is over: still nothing more
        assert [json.loads(i)["key"] for i in await compensated(journal, handle.id)] == undone
        assert undone == UNDONE
        status = await handle.query("status", result_type=SagaStatus)
        assert held_by(result.halt_id)(status)
        assert [e.input["key"] for e in status.executed] == still_executed

        await halt_service.resume(result.halt_id, by="olivia", reason="fixed")
        ended = await asyncio.wait_for(handle.result(), 60)
    assert ended.status is SagaState.COMPENSATED
    assert UNDONE == ["c", "b", "a"]
    assert len(await compensated(journal, handle.id)) == 3
    assert (await journal.verify(handle.id)).ok
