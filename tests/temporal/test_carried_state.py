"""What a saga carries through continue-as-new: the next run goes on as the last one would have.

The first run makes two calls, swallows a failed one, has a misspelt decision refused, and
continues as new. The next run shows the carried head, effects and refusal in ``status``; when
its body ends, the failure the first run swallowed still makes it compensate, and the effects
the first run made are undone, newest first.
"""

from __future__ import annotations

import contextlib
import uuid

from temporalio import workflow
from temporalio.client import Client

from sagacity.errors import ToolFailed
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaCarry, SagaResult, SagaState
from sagacity.temporal.saga import Saga
from tests.temporal import sample_tools
from tests.temporal.conftest import serving, wait_for


@workflow.defn(name="tests.CarriedState", sandboxed=False)
class CarriedState:
    """Two calls and a swallowed failure, continued as new once a decision was refused; the
    next run ends when told to (``finish``)."""

    @workflow.init
    def __init__(self, carry: SagaCarry | None = None) -> None:
        self.saga = Saga(carry=carry)
        self.finished = False

    @workflow.signal
    def finish(self) -> None:
        self.finished = True

    @workflow.run
    async def run(self, carry: SagaCarry | None = None) -> SagaResult:
        saga = self.saga

        async def body() -> None:
            if carry is None:
                await saga.call(sample_tools.set_flag, "carried-1")
                await saga.call("set_flag", name="carried-2")
                with contextlib.suppress(ToolFailed):
                    await saga.call("decline", reason="not today")
                await workflow.wait_condition(lambda: bool(saga.status().refused_decisions))
                workflow.continue_as_new(args=[saga.carry()])
            await workflow.wait_condition(lambda: self.finished)

        return await saga.run(body)


async def test_a_continued_saga_keeps_its_effects_failures_and_refusals(
    temporal_client: Client, journal: JournalStore, approvals: ApprovalStore
) -> None:
    task_queue = f"carried-{uuid.uuid4().hex[:8]}"
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=sample_tools.TOOLS,
        workflows=[CarriedState],
    ):
        handle = await temporal_client.start_workflow(
            CarriedState.run, args=[None], id=task_queue, task_queue=task_queue
        )
        first = await wait_for(handle, lambda s: s.head.seq >= 6)  # two calls and the failure
        await handle.signal("aprove", {"journal_seq": 1, "approver": "alice"})
        latest = temporal_client.get_workflow_handle(task_queue, result_type=SagaResult)
        carried = await wait_for(
            latest,
            lambda s: s.executed_count == 2 and bool(s.refused_decisions),
        )
        assert (await latest.describe()).run_id != handle.result_run_id, "no continue-as-new"
        assert carried.head == first.head
        assert [e.tool_name for e in carried.executed] == ["set_flag", "set_flag"]
        assert carried.refused_decisions == ["?: unknown signal 'aprove'"]
        await latest.signal(CarriedState.finish)
        result = await latest.result()

    # the failure the first run swallowed still compensates the saga
    assert result.status is SagaState.COMPENSATED, result
    assert result.error is not None
    assert "a tool failure was swallowed" in result.error.message
    assert [e.call_seq for e in result.compensated] == [3, 1]
    assert sample_tools.EFFECTS[-2:] == ["unset carried-2", "unset carried-1"]
