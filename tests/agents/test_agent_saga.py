"""Agent sagas on a real Temporal server and Postgres, driven by the real Agents SDK loop.

The model is scripted (no API key); everything else is what a user runs: the agent's tool calls
are the saga's journaled activities, approvals are signals, compensation runs in the workflow.
"""

from __future__ import annotations

import json

import pytest
from temporalio.client import Client, WorkflowUpdateFailedError

from bench.long_saga import run_chain
from sagacity.agents import AgentSagaRequest, Call, Say, Script
from sagacity.agents.models import Step
from sagacity.store import JournalStore
from sagacity.temporal.models import Abort, SagaOptions, SagaState, SagaStatus
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, phases, wait_for
from tests.temporal.test_order_saga import START, approve_when_waiting
from workflows.agent_order.script import PROMPT
from workflows.order.shop import Shop

ORDER_TOOLS = ["reserve_inventory", "create_order", "send_confirmation"]

#: the agent tries a tool that fails, shrugs, and answers anyway (the SDK swallows the error)
SHRUG = Script(
    turns=[
        [
            Call("set_flag", {"name": "a"}),
            Call("explode", {"reason": "the disk is full"}),
            Say(lambda c: f"Done; note that explode said: {c.result_of('explode')}"),
        ],
        [Say("Understood: the flag I set was taken down again.")],
    ]
)


async def test_failure_the_sdk_swallows_still_compensates(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"shrug": SHRUG}) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt="go", model="shrug")
        )
        result = await handle.result()

    # the agent carried on and answered, as if nothing much happened...
    assert result.turns == [
        "Done; note that explode said: The tool call failed (RuntimeError): the disk is full"
    ]
    # ...but the saga saw the failure and undid what had taken effect
    assert result.saga.status is SagaState.COMPENSATED
    assert result.saga.error is not None and "the disk is full" in result.saga.error.message
    # explode failed with its effect unknown, so it is compensated too, newest first
    assert [e.tool_name for e in result.saga.compensated] == ["explode", "set_flag"]
    assert sample_tools.EFFECTS == ["set a", "unexplode failed=True result=None", "unset a"]
    assert await phases(journal, handle.id) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("explode", "INTENT"),
        ("explode", "FAILED"),
        ("explode", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]
    assert [(s.tool, s.status, s.seq) for s in result.steps] == [
        ("set_flag", "executed", 1),
        ("explode", "failed", 3),
    ]
    # the agent was told what was undone, and its answer to that is the final output
    assert result.compensation_summary is not None
    assert "set_flag (call 1)" in result.compensation_summary
    assert result.final_output == "Understood: the flag I set was taken down again."
    assert (await journal.verify(handle.id)).ok


async def test_let_agent_recover_completes_and_still_journals_the_failure(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"shrug": SHRUG}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(prompt="go", model="shrug", policy="let_agent_recover"),
        )
        result = await handle.result()

    assert result.saga.status is SagaState.COMPLETED
    assert result.compensation_summary is None and result.final_output == result.turns[-1]
    assert sample_tools.EFFECTS == ["set a"]  # nothing undone
    assert ("explode", "FAILED") in await phases(journal, handle.id)
    # the failed call may have done something: completing does not hide it
    assert result.saga.needs_attention is not None
    assert "explode (seq 3)" in result.saga.needs_attention


async def test_agent_waits_for_approval_then_reports_the_tools_result(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker() as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT, tools=ORDER_TOOLS)
        )
        waiting = await wait_for(handle, awaiting_approval)
        assert waiting.pending_approval is not None
        assert waiting.pending_approval.tool_name == "send_confirmation"
        # nothing irreversible has happened while it waits
        assert (await shop.snapshot()).outbox == 0
        done = await handle.query("steps")
        assert [s["tool"] for s in done] == ["reserve_inventory", "create_order"]
        # one prompt, one run: a second message is refused, not queued
        with pytest.raises(WorkflowUpdateFailedError) as refused:
            await handle.execute_update("turn", "and a milk jug", result_type=str)
        assert "multi_turn is off" in str(refused.value.cause)
        # a malformed decision is refused and recorded; the saga stays queryable and decidable
        await handle.signal("approve", {"journal_seq": 5, "approved_by": "x"})
        status = await wait_for(handle, lambda s: bool(s.refused_decisions))
        assert status.state is SagaState.AWAITING_APPROVAL
        assert "approved_by" in status.refused_decisions[0]
        await approve_when_waiting(temporal_client, handle.id)
        result = await handle.result()

    assert result.saga.status is SagaState.COMPLETED
    message_id = result.steps[-1].output["message_id"]
    order_id = result.steps[1].output["order_id"]
    assert result.final_output is not None
    assert order_id in result.final_output and f"message {message_id}" in result.final_output
    # the model passed each tool's output on to the next call
    assert result.steps[1].arguments["reservation_id"] == result.steps[0].output["reservation_id"]
    assert result.steps[2].arguments == {"order_id": order_id}
    rows = await journal.read(handle.id)
    assert [r.phase.value for r in rows][4:] == [
        "AWAITING_APPROVAL",
        "APPROVED",
        "INTENT",
        "EXECUTED",
    ]
    assert rows[5].payload == "approver=alice"
    snap = await shop.snapshot()
    assert snap.available["p-1"] == START["p-1"] - 2 and snap.outbox == 1


async def test_rejected_call_is_told_to_the_agent_and_compensated(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker() as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT)
        )
        waiting = await wait_for(handle, awaiting_approval)
        assert waiting.pending_approval is not None
        await handle.signal(
            "reject",
            {
                "journal_seq": waiting.pending_approval.journal_seq,
                "approver": "bob",
                "reason": "wrong customer",
            },
        )
        result = await handle.result()

    assert result.steps[-1].status == "rejected"
    assert "wrong customer" in result.turns[0]
    assert result.saga.status is SagaState.COMPENSATED
    assert [e.tool_name for e in result.saga.compensated] == ["create_order", "reserve_inventory"]
    assert (await shop.snapshot()).available == START


#: two tools in one model reply, then one that fails
PARALLEL = Script(
    turns=[
        [
            [Call("set_flag", {"name": "a"}), Call("send_note", {"text": "b"})],
            # fails without effect, so only the two parallel calls are undone
            Call("decline", {"reason": "no"}),
            Say("done"),
        ]
    ]
)


async def test_parallel_tool_calls_journal_gap_free_and_both_are_compensated(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"parallel": PARALLEL}) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt="go", model="parallel")
        )
        result = await handle.result()

    rows = await journal.read(handle.id)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    first_four = {(r.tool_name, r.phase.value) for r in rows[:4]}
    assert first_four == {
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("send_note", "INTENT"),
        ("send_note", "EXECUTED"),
    }
    # each call's INTENT is followed by its own outcome: the calls ran one after the other
    assert rows[0].tool_name == rows[1].tool_name and rows[2].tool_name == rows[3].tool_name
    assert result.saga.status is SagaState.COMPENSATED
    assert {e.tool_name for e in result.saga.compensated} == {"set_flag", "send_note"}
    assert [r.phase.value for r in rows[-2:]] == ["COMPENSATED", "COMPENSATED"]
    assert sorted(sample_tools.EFFECTS) == sorted(["set a", "note b", "unnote b", "unset a"])
    assert (await journal.verify(handle.id)).ok


#: an agent that never stops calling tools
LOOP = Script(turns=[[*(Call("set_flag", {"name": f"f{i}"}) for i in range(5)), Say("never")]])


async def test_run_that_exceeds_max_turns_is_compensated(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop
) -> None:
    async with agent_worker({"loop": LOOP}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(prompt="go", model="loop", max_turns=2),
        )
        result = await handle.result()

    assert result.saga.status is SagaState.COMPENSATED
    assert result.saga.error is not None and result.saga.error.type == "AgentRunFailed"
    assert "MaxTurnsExceeded" in result.saga.error.message
    assert sample_tools.EFFECTS == ["set f0", "set f1", "unset f1", "unset f0"]


#: two turns of a conversation: one that works, one that fails
CHAT = Script(
    turns=[
        [Call("set_flag", {"name": "a"}), Say("flag a is set")],
        [Call("send_note", {"text": "hi"}), Call("decline", {"reason": "nope"}), Say("sorry")],
        [Say("noted")],
    ]
)


async def test_multi_turn_keeps_one_saga_and_compensates_at_the_end(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"chat": CHAT}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(
                prompt="set a", model="chat", multi_turn=True, feed_compensation_summary=False
            ),
        )
        assert await handle.execute_update("turn", "note hi", result_type=str) == "sorry"
        # the failure does not end the conversation; the saga is still open
        status = await handle.query("status", result_type=SagaStatus)
        assert status.state is SagaState.RUNNING
        assert sample_tools.EFFECTS == ["set a", "note hi"]
        await handle.signal("finish")
        result = await handle.result()

    assert result.turns == ["flag a is set", "sorry"]
    assert [s.turn for s in result.steps] == [0, 1, 1]
    assert result.saga.status is SagaState.COMPENSATED
    assert sample_tools.EFFECTS == ["set a", "note hi", "unnote hi", "unset a"]
    assert result.final_output == "sorry"  # not fed back: the summary is in the result only
    assert result.compensation_summary is not None
    assert [r.seq for r in await journal.read(handle.id)] == list(range(1, 9))


async def test_abort_stops_the_agent_and_compensates(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker() as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT)
        )
        await wait_for(handle, awaiting_approval)
        await handle.signal("abort", Abort(reason="customer cancelled", by="carol"))
        result = await handle.result()

    assert result.saga.status is SagaState.ABORTED
    assert (await shop.snapshot()).available == START
    tail = (await phases(journal, handle.id))[-3:]
    assert tail == [
        ("approval-gate", "REJECTED"),
        ("create_order", "COMPENSATED"),
        ("reserve_inventory", "COMPENSATED"),
    ]


#: a long conversation: a flag per turn, then a refusal that ends it compensated
_FLAG_TURNS: list[list[Step]] = [
    [Call("set_flag", {"name": f"t{i}"}), Say(f"turn {i} done")] for i in range(6)
]
LONG_CHAT = Script(
    turns=[
        *_FLAG_TURNS,
        [Call("decline", {"reason": "enough"}), Say("stopping")],
    ]
)


async def test_a_long_conversation_continues_as_new_between_turns(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"long": LONG_CHAT}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(
                prompt="go",
                model="long",
                multi_turn=True,
                feed_compensation_summary=False,
                options=SagaOptions(continue_as_new_events=50),
            ),
        )
        for i in range(1, 7):
            reply = await handle.execute_update("turn", f"next {i}", result_type=str)
            assert reply == ("stopping" if i == 6 else f"turn {i} done")
        await handle.signal("finish")
        result = await handle.result()
        runs = await run_chain(temporal_client, handle.id)

    assert len(runs) > 1  # the conversation went on in new runs
    assert result.turns == [*(f"turn {i} done" for i in range(6)), "stopping"]
    assert [s.turn for s in result.steps] == list(range(7))
    assert result.saga.status is SagaState.COMPENSATED
    effects = sample_tools.EFFECTS
    assert effects == [
        *(f"set t{i}" for i in range(6)),
        *(f"unset t{i}" for i in reversed(range(6))),
    ]
    rows = await journal.read(handle.id)
    assert [r.seq for r in rows] == list(range(1, len(rows) + 1))
    assert (await journal.verify(handle.id)).ok


#: the agent is issued a key, checks it got the real one, then a tool fails: the key is revoked
ISSUE_AND_FAIL = Script(
    turns=[
        [
            Call("issue_key", {"owner": "ann"}),
            Call(
                "explode",
                lambda c: {
                    "reason": "real key: "
                    + str(c.result_of("issue_key")["api_key"] == sample_tools.ISSUED_KEY)
                },
            ),
            Say("done"),
        ],
        [Say("Understood.")],
    ]
)


async def test_the_model_and_the_compensation_get_the_real_value_the_steps_show_a_fingerprint(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"issue": ISSUE_AND_FAIL}) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt="go", model="issue")
        )
        result = await handle.result()

    assert result.saga.status is SagaState.COMPENSATED
    # the model was given the tool's real result, and the compensation the real key
    assert sample_tools.EFFECTS[-1] == f"revoked {sample_tools.ISSUED_KEY}"
    assert result.steps[1].arguments == {"reason": "real key: True"}
    # what the saga shows of the call is the journal's view
    shown = result.steps[0].output["api_key"]["$redacted"]
    assert shown.startswith("hmac:") and result.steps[0].output["owner"] == "ann"
    assert sample_tools.ISSUED_KEY not in result.model_dump_json()
    rows = json.dumps([(r.input, r.payload) for r in await journal.read(handle.id)])
    assert sample_tools.ISSUED_KEY not in rows and shown in rows
