"""Sagas under ordinary Temporal operations: id reuse, reset, cancel, abort races, bad signals.

Each test asserts what a user would check afterwards: the journal, the example's tables and the
saga's final state.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
)
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from bench.long_saga import run_chain
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.redaction import Redactor
from sagacity.journal import Draft, Phase, to_json
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import (
    Abort,
    Approve,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, phases, serving, wait_for
from tests.temporal.test_payload_limits import reset_to_first_task
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def start_steps(
    client: Client, worker: Worker, steps: list[Step], sid: str | None = None
) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=steps),
        id=sid or new_id("ops"),
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )


async def start_order(client: Client, worker: Worker) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=new_id("order"),
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )


async def reset_after_first_call(client: Client, handle: WorkflowHandle[Any, Any]) -> str:
    """Reset the saga to the workflow task after its first tool call completed; the new run id."""
    completed_call = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed_call = event.event_id
        if (
            completed_call is not None
            and event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED
        ):
            reset_to = event.event_id
            break
    else:
        raise AssertionError("no completed call to reset after")
    response = await client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=handle.id),
            reason="test: reset after the first call",
            workflow_task_finish_event_id=reset_to,
            request_id=str(uuid.uuid4()),
        )
    )
    return response.run_id


async def rerun_after_first_call(
    client: Client, handle: WorkflowHandle[Any, Any], within: float = 60
) -> SagaResult:
    """Reset the saga after its first tool call; the new run's result, within ``within`` s."""
    run_id = await reset_after_first_call(client, handle)
    again = client.get_workflow_handle(handle.id, run_id=run_id, result_type=SagaResult)
    return await asyncio.wait_for(again.result(), within)


# -- one id, one journal ----------------------------------------------------------------------


async def test_a_reused_id_is_refused_and_runs_nothing(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    first = await start_steps(temporal_client, worker, [Step(tool="set_flag", args={"name": "x"})])
    assert (await first.result()).status is SagaState.COMPLETED

    for args in ({"name": "x"}, {"name": "y"}):
        again = await start_steps(
            temporal_client, worker, [Step(tool="set_flag", args=args)], sid=first.id
        )
        with pytest.raises(WorkflowFailureError) as refused:
            await asyncio.wait_for(again.result(), 30)
        cause = refused.value.cause
        assert isinstance(cause, ApplicationError) and cause.type == "SagaIdTaken"
        assert "start this saga under a new id" in cause.message

    assert sample_tools.EFFECTS == ["set x"]  # the tool never ran again
    assert await phases(journal, first.id) == [("set_flag", "INTENT"), ("set_flag", "EXECUTED")]
    assert (await journal.verify(first.id)).ok


async def test_an_id_whose_journal_predates_ownership_is_refused(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid = new_id("legacy")
    await journal.append_at(Draft(sid, "set_flag", Phase.INTENT, to_json({"name": "old"})), seq=1)

    handle = await start_steps(
        temporal_client, worker, [Step(tool="set_flag", args={"name": "new"})], sid=sid
    )
    with pytest.raises(WorkflowFailureError) as refused:
        await asyncio.wait_for(handle.result(), 30)
    assert isinstance(refused.value.cause, ApplicationError)
    assert refused.value.cause.type == "SagaIdTaken"
    assert sample_tools.EFFECTS == []
    assert len(await journal.read(sid)) == 1


async def test_a_reset_completed_order_repeats_no_effect(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_order(temporal_client, worker)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    await handle.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="alice")
    )
    done = await handle.result()
    assert done.status is SagaState.COMPLETED
    before = await journal.read(handle.id)

    result = await rerun_after_first_call(temporal_client, handle)

    # the new run took create_order and send_confirmation from the journal: nothing twice
    assert result.status is SagaState.COMPLETED
    assert result.value == done.value
    assert await journal.read(handle.id) == before
    snap = await shop.snapshot()
    assert (snap.available["p-1"], snap.placed_orders, snap.outbox) == (8, 1, 1)


async def test_a_reset_saga_takes_a_call_with_redacted_input_from_the_journal(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="wire", args={"amount": 5, "api_token": "tok-123"}),
        ],
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    await handle.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="alice")
    )
    done = await handle.result()
    before = await journal.read(handle.id)

    result = await rerun_after_first_call(temporal_client, handle, within=30)

    # the wire the journal shows EXECUTED, its token a marker there, is not asked for or made
    # again: the reset run completes without a second approval
    assert result.status is SagaState.COMPLETED
    assert result.value == done.value == {"set_flag": "a", "wire": "wire-5"}
    assert sample_tools.EFFECTS == ["set a", "wired 5"]
    assert await journal.read(handle.id) == before


async def test_a_reset_compensated_saga_continues_the_chain(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="send_note", args={"text": "b"}),
            Step(tool="decline", args={"reason": "no"}),
        ],
    )
    assert (await handle.result()).status is SagaState.COMPENSATED
    assert sample_tools.EFFECTS == ["set a", "note b", "unnote b", "unset a"]
    first_rows = len(await journal.read(handle.id))
    sample_tools.EFFECTS.clear()

    result = await rerun_after_first_call(temporal_client, handle)

    # the journal said set_flag and send_note were undone: send_note is a new call (after the
    # journal's head), set_flag is not undone twice
    assert result.status is SagaState.COMPENSATED
    assert sample_tools.EFFECTS == ["note b", "unnote b"]
    rows = await journal.read(handle.id)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert [(r.tool_name, r.phase.value) for r in rows[first_rows:]] == [
        ("send_note", "INTENT"),
        ("send_note", "EXECUTED"),
        ("decline", "INTENT"),
        ("decline", "FAILED"),
        ("send_note", "COMPENSATED"),
    ]
    assert (await journal.verify(handle.id)).ok


# -- cancel is an abort -------------------------------------------------------------------------


async def test_cancel_while_waiting_for_approval_compensates_and_closes_the_request(
    temporal_client: Client,
    worker: Worker,
    shop: Shop,
    journal: JournalStore,
    approvals: ApprovalStore,
) -> None:
    handle = await start_order(temporal_client, worker)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    assert await approvals.get(handle.id, seq) is not None

    await handle.cancel()
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.ABORTED
    assert result.error is not None and result.error.type == "SagaCancelled"
    assert [e.tool_name for e in result.compensated] == ["create_order", "reserve_inventory"]
    assert (await phases(journal, handle.id))[4:] == [
        ("send_confirmation", "AWAITING_APPROVAL"),
        ("approval-gate", "REJECTED"),
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    assert '"by":"temporal-cancel"' in (await journal.read(handle.id))[5].payload
    assert await approvals.get(handle.id, seq) is None
    snap = await shop.snapshot()
    assert (snap.available["p-1"], snap.held_reservations, snap.placed_orders) == (10, 0, 0)
    final = await handle.query("status", result_type=SagaStatus)
    assert final.state is SagaState.ABORTED


async def test_cancel_mid_call_lets_the_call_finish_then_undoes_it(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="slow_note", args={"text": "b", "seconds": 2}),
            Step(tool="set_flag", args={"name": "never"}),
        ],
    )
    await wait_for(handle, lambda s: s.running == "slow_note")
    await handle.cancel()
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.ABORTED
    assert sample_tools.EFFECTS == ["set a", "slow b", "unslow b", "unset a"]
    assert await phases(journal, handle.id) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("slow_note", "INTENT"),
        ("slow_note", "EXECUTED"),
        ("slow_note", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]


async def test_cancel_before_the_first_workflow_task_ends_the_saga_aborted_with_its_result(
    temporal_client: Client, journal: JournalStore, approvals: ApprovalStore
) -> None:
    # the cancel is in the first workflow task, so it lands during the steps check: the saga
    # still ends with its result, aborted and cancelled, not as a workflow that just stopped
    task_queue = new_id("cancel-first")
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="set_flag", args={"name": "never"})]),
        id=new_id("ops"),
        task_queue=task_queue,
        result_type=SagaResult,
    )
    await handle.cancel()
    async with serving(
        temporal_client, task_queue, journal=journal, approvals=approvals, tools=sample_tools.TOOLS
    ):
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.ABORTED
    assert result.error is not None and result.error.type == "SagaCancelled"
    assert "set never" not in sample_tools.EFFECTS
    assert await phases(journal, handle.id) == []


async def test_abort_right_after_approve_never_runs_the_irreversible_call(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_order(temporal_client, worker)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    await handle.signal("abort", Abort(reason="changed my mind", by="bob"))
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.ABORTED
    journaled = await phases(journal, handle.id)
    assert ("send_confirmation", "INTENT") not in journaled
    assert journaled[-3:] == [
        ("approval-gate", "REJECTED"),
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    snap = await shop.snapshot()
    assert (snap.outbox, snap.available["p-1"], snap.placed_orders) == (0, 10, 0)


# -- bad signals and updates ----------------------------------------------------------------------


async def test_malformed_signals_are_refused_and_the_saga_stays_decidable(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_order(temporal_client, worker)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    bad: list[tuple[str, Any]] = [
        ("approve", {"journal_seq": seq, "approved_by": "x"}),
        ("approve", {"journal_seq": seq, "approver": "mallory\x00"}),
        ("approve", {"journal_seq": seq, "approver": "eve", "input_hsh": "0" * 64}),
        ("reject", {"journal_seq": str(seq), "approver": "eve"}),
        ("abort", {"reason": 5}),
        ("resolve", ["not", "an", "object"]),
    ]
    for name, payload in bad:
        await handle.signal(name, payload)
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update(
            "decide",
            {"journal_seq": seq, "approver": "eve", "approve": True, "input_hsh": "0" * 64},
            result_type=str,
        )
    assert "input_hsh" in str(refused.value.cause)

    # the refused update is recorded too
    status = await wait_for(handle, lambda s: len(s.refused_decisions) == len(bad) + 1)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert all("malformed" in r for r in status.refused_decisions)
    assert "approved_by" in status.refused_decisions[0]
    assert "input_hsh" in status.refused_decisions[2]
    assert "input_hsh" in status.refused_decisions[-1]

    # still decidable: the right decision goes through
    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPLETED
    assert (await journal.read(handle.id))[5].payload == "approver=alice"


async def test_bad_signals_do_not_stop_the_deadline(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest.model_validate({"options": {"approval_deadline_s": 2}}),
        id=new_id("order"),
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    await wait_for(handle, awaiting_approval)
    await handle.signal("approve", {"journal_seq": 5, "approved_by": "x"})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED
    assert '"reason":"timeout"' in (await journal.read(handle.id))[5].payload


# -- failures after INTENT ------------------------------------------------------------------------


async def test_an_idempotent_call_that_keeps_timing_out_is_failed_and_undone_once(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "t"}),
            Step(tool="stall", args={"key": "k", "seconds": 3}),
        ],
    )
    result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.COMPENSATED
    assert sample_tools.EFFECTS == [
        "set t",
        "stall k",
        "stall k",
        "stall k",
        "unstall k failed=True",
        "unset t",
    ]
    rows = await journal.read(handle.id)
    assert [(r.tool_name, r.phase.value) for r in rows[2:]] == [
        ("stall", "INTENT"),
        ("stall", "FAILED"),
        ("stall", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]
    assert '"type":"ToolTimeout"' in rows[3].payload and '"effect":"unknown"' in rows[3].payload
    assert (await journal.verify(handle.id)).ok


async def test_a_tool_name_the_journal_refuses_fails_at_once(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    handle = await start_steps(
        temporal_client,
        worker,
        [Step(tool="set_flag", args={"name": "n"}), Step(tool="bad\x00name", args={})],
    )
    # no tool has that name: the steps are refused before any runs (test_validation.py)
    with pytest.raises(WorkflowFailureError) as refused:
        await asyncio.wait_for(handle.result(), 30)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "StepsInvalid"
    assert "no tool named 'bad\\x00name'" in cause.message
    assert "set never" not in sample_tools.EFFECTS
    assert await phases(journal, handle.id) == []


# -- long sagas -------------------------------------------------------------------------------


async def run_long(
    client: Client, worker: Worker, steps: list[Step]
) -> tuple[WorkflowHandle[Any, SagaResult], SagaResult]:
    """Run ``steps`` then a declined step, continuing as new every 50 events; handle, result."""
    handle = await client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[*steps, Step(tool="decline", args={"reason": "stop here"})],
            options=SagaOptions(continue_as_new_events=50),
        ),
        id=new_id("long"),
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    return handle, await asyncio.wait_for(handle.result(), 120)


async def test_a_long_saga_continues_as_new_and_compensates_every_run(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    names = [f"f{i}" for i in range(24)]
    handle, result = await run_long(
        temporal_client,
        worker,
        [
            *(Step(tool="set_flag", args={"name": n}, id=n) for n in names),
            Step(tool="send_note", args={"text": {"$ref": "f0"}}),
        ],
    )

    # the calls and the compensation each went on in new runs, none of them long
    events_per_run = [events for events, _ in await run_chain(temporal_client, handle.id)]
    assert len(events_per_run) >= 4 and max(events_per_run) < 120
    # effects of every run were undone, newest first, once each; $ref reached across runs
    assert result.status is SagaState.COMPENSATED
    effects = sample_tools.EFFECTS
    assert effects == [
        *(f"set {n}" for n in names),
        "note f0",
        "unnote f0",
        *(f"unset {n}" for n in reversed(names)),
    ]
    rows = await journal.read(handle.id)
    assert [r.seq for r in rows] == list(range(1, 26 * 2 + 25 + 1))
    assert result.head.seq == rows[-1].seq
    assert (await journal.verify(handle.id)).ok


async def test_real_values_cross_continue_as_new_to_the_compensation(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    names = [f"f{i}" for i in range(12)]
    handle, result = await run_long(
        temporal_client,
        worker,
        [
            Step(tool="issue_key", args={"owner": "ann"}, id="key"),
            *(Step(tool="set_flag", args={"name": n}, id=n) for n in names),
            Step(tool="start_session", args={"api_token": {"$ref": "key.api_key"}}),
        ],
    )

    assert len(await run_chain(temporal_client, handle.id)) >= 3
    assert result.status is SagaState.COMPENSATED
    key = sample_tools.ISSUED_KEY
    # a later run got the key by $ref; the compensations, in yet later runs, the real values
    received = sample_tools.RECEIVED
    assert received == [("start_session", key), ("stop_session", key)]
    assert sample_tools.EFFECTS[-1] == f"revoked {key}"
    assert key not in result.model_dump_json()
    assert key not in json.dumps([(r.input, r.payload) for r in await journal.read(handle.id)])


# -- evidence side paths never make a false SUSPECT -----------------------------------------------


async def test_a_checkpoint_that_cannot_be_written_does_not_fail_the_call(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    tmp_path: Path,
) -> None:
    # the checkpoint directory turns into a file: every checkpoint write fails
    writer = CheckpointWriter(tmp_path / "checkpoints", Ed25519PrivateKey.generate())
    (tmp_path / "checkpoints").rmdir()
    (tmp_path / "checkpoints").write_text("not a directory")
    plugin = SagacityPlugin(
        journal=journal, approvals=approvals, tools=sample_tools.TOOLS, checkpoints=writer
    )
    async with Worker(temporal_client, task_queue=task_queue, plugins=[plugin]) as worker:
        handle = await start_steps(
            temporal_client,
            worker,
            [Step(tool="set_flag", args={"name": "c"}), Step(tool="send_note", args={"text": "d"})],
        )
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.COMPLETED
    assert sample_tools.EFFECTS == ["set c", "note d"]
    assert [p for _, p in await phases(journal, handle.id)] == ["INTENT", "EXECUTED"] * 2


async def test_a_redaction_rule_change_during_an_approval_wait_does_not_refuse_the_call(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
) -> None:
    def plugin(redactor: Redactor) -> SagacityPlugin:
        return SagacityPlugin(
            journal=journal, approvals=approvals, tools=sample_tools.TOOLS, redactor=redactor
        )

    steps = [Step(tool="wire", args={"amount": 5, "api_token": "tok-123"})]
    # the request is made under the default rules (api_token redacted) ...
    async with Worker(temporal_client, task_queue=task_queue, plugins=[plugin(Redactor())]) as w:
        handle = await start_steps(temporal_client, w, steps)
        status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    assert "tok-123" not in status.pending_approval.input_json
    # ... and approved after a deploy that redacts nothing: the same call still runs
    await handle.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="alice")
    )
    async with Worker(temporal_client, task_queue=task_queue, plugins=[plugin(Redactor([]))]):
        result = await asyncio.wait_for(handle.result(), 60)

    assert result.status is SagaState.COMPLETED
    assert sample_tools.EFFECTS == ["wired 5"]
    assert [p for _, p in await phases(journal, handle.id)][-2:] == ["INTENT", "EXECUTED"]


async def test_an_irreversible_first_step_is_gated_before_it_runs(
    temporal_client: Client, worker: Worker, journal: JournalStore
) -> None:
    """The call that opens a new saga's journal does not know the catalog yet: an IRREVERSIBLE
    tool comes back unrun, and the saga asks for approval before its INTENT."""
    handle = await start_steps(
        temporal_client,
        worker,
        [Step(tool="wire", args={"amount": 4, "api_token": "tok-g"})],
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    assert sample_tools.EFFECTS == []
    await handle.signal(
        "approve", Approve(journal_seq=status.pending_approval.journal_seq, approver="alice")
    )
    done = await asyncio.wait_for(handle.result(), 30)
    assert done.status is SagaState.COMPLETED, done
    assert sample_tools.EFFECTS == ["wired 4"]
    assert [p for _, p in await phases(journal, handle.id)] == [
        "AWAITING_APPROVAL",
        "APPROVED",
        "INTENT",
        "EXECUTED",
    ]


async def test_a_steps_saga_reset_to_its_first_task_repeats_no_effect(
    temporal_client: Client, worker: Worker, journal: JournalStore
) -> None:
    """Reset to its very first workflow task, a saga opens again in its first call's activity:
    the journal its chain holds already comes back unrun, and the run adopts what it holds."""
    steps = [Step(tool="set_flag", args={"name": "r"}), Step(tool="send_note", args={"text": "t"})]
    handle = await start_steps(temporal_client, worker, steps)
    done = await handle.result()
    assert done.status is SagaState.COMPLETED
    before = await journal.read(handle.id)
    effects = list(sample_tools.EFFECTS)

    run_id = await reset_to_first_task(temporal_client, handle.id)
    again = temporal_client.get_workflow_handle(handle.id, run_id=run_id, result_type=SagaResult)
    result = await asyncio.wait_for(again.result(), 60)

    assert result.status is SagaState.COMPLETED, result
    assert result.value == done.value
    assert await journal.read(handle.id) == before
    assert effects == sample_tools.EFFECTS
