"""The agent's conversation by reference: history grows with what is new, not with the square.

A multi-turn agent saga on a real Temporal server and Postgres: every model call sends only the
items added since the stored version it extends, continue-as-new hands over that version's hash,
and a stored version changed behind the workflow's back stops the conversation, compensated.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.exceptions import ApplicationError

from sagacity.agents import AgentSagaRequest, AgentSagaResult, Call, Say, Script
from sagacity.agents.conversation import INVOKE_MODEL
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaOptions, SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal import sample_tools
from tests.temporal.history import decrypted
from workflows.order.shop import Shop

TURNS = 8
PROMPT = "Set the flags, one per turn."
#: a long message the user says once, in the second turn, and no later model call carries
LONG = "Please keep this in mind: " + "the sky is a deep and quiet blue. " * 200

CHAT = Script(
    turns=[[Call("set_flag", {"name": f"t{i}"}), Say(f"turn {i} done")] for i in range(TURNS)]
)


async def _chat(handle: WorkflowHandle[object, AgentSagaResult], turns: int) -> None:
    for i in range(1, turns):
        said = LONG if i == 1 else f"next {i}"
        assert await handle.execute_update("turn", said, result_type=str) == f"turn {i} done"


async def _model_inputs(client: Client, workflow_id: str) -> tuple[list[str], list[str]]:
    """Per run: the inputs of its model calls, and its continue-as-new input, as the codec's key
    holder reads them."""
    calls: list[str] = []
    handed: list[str] = []
    first = (await client.get_workflow_handle(workflow_id).describe()).raw_description
    run: str | None = first.workflow_execution_info.first_run_id
    while run:
        history = await decrypted(
            await client.get_workflow_handle(workflow_id, run_id=run).fetch_history(),
            client.data_converter.payload_codec,
        )
        run = None
        for event in history.events:
            if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
                attrs = event.activity_task_scheduled_event_attributes
                assert attrs.activity_type.name != "invoke_model_activity"  # never by value
                if attrs.activity_type.name == INVOKE_MODEL:
                    calls.append(attrs.input.payloads[0].data.decode())
            elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
                attrs_can = event.workflow_execution_continued_as_new_event_attributes
                handed.append(attrs_can.input.payloads[0].data.decode())
                run = attrs_can.new_execution_run_id
    return calls, handed


async def test_model_calls_carry_only_what_is_new(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"chat": CHAT}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(prompt=PROMPT, model="chat", multi_turn=True),
        )
        await _chat(handle, TURNS)
        await handle.signal("finish")
        result = await handle.result()

    assert result.saga.status is SagaState.COMPLETED
    assert result.turns == [f"turn {i} done" for i in range(TURNS)]
    calls, _ = await _model_inputs(temporal_client, handle.id)
    assert len(calls) == 2 * TURNS  # a tool call and a reply per turn
    # the long message went to the model once; every later call extends the stored version
    assert [LONG in c for c in calls] == [False, False, True] + [False] * (len(calls) - 3)
    assert [json.loads(c)["base"] is None for c in calls] == [True] + [False] * (len(calls) - 1)
    # so the last call is about the size of the second, though the conversation is 8 times
    # longer (each call also carries the tools' schemas and the instructions, about 5 kB)
    assert len(calls[-1]) < len(calls[1]) + 1000 < len(calls[2])


async def test_continue_as_new_hands_over_the_conversation_by_reference(
    temporal_client: Client, agent_worker: WorkerFactory, shop: Shop, journal: JournalStore
) -> None:
    async with agent_worker({"chat": CHAT}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(
                prompt=PROMPT,
                model="chat",
                multi_turn=True,
                options=SagaOptions(continue_as_new_events=50),
            ),
        )
        # the scripted model finds its place by counting the conversation's user messages: the
        # right reply after each hand-over means the next run loaded the whole conversation
        await _chat(handle, TURNS)
        await handle.signal("finish")
        result = await handle.result()

    assert result.turns == [f"turn {i} done" for i in range(TURNS)]
    calls, handed = await _model_inputs(temporal_client, handle.id)
    assert len(handed) >= 2
    for carried in handed:
        resume = json.loads(carried)["resume"]
        assert resume["conversation"] is not None and LONG not in carried
    assert sum(json.loads(c)["base"] is None for c in calls) == 1
    effects = sample_tools.EFFECTS
    assert effects == [f"set t{i}" for i in range(TURNS)]


async def test_a_changed_conversation_stops_the_agent_and_compensates(
    temporal_client: Client,
    agent_worker: WorkerFactory,
    shop: Shop,
    journal: JournalStore,
    owner_database_url: str,
) -> None:
    async with agent_worker({"chat": CHAT}) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(
                prompt=PROMPT, model="chat", multi_turn=True, feed_compensation_summary=False
            ),
        )
        await _chat(handle, 2)
        # someone with the table owner's rights rewrites what the user said
        async with await psycopg.AsyncConnection.connect(owner_database_url) as owner:
            await owner.execute(
                "UPDATE sagacity_conversation SET items = replace(items, 'deep', 'pale') "
                "WHERE saga_id = %s",
                (handle.id,),
            )
            await owner.commit()
        with pytest.raises(WorkflowUpdateFailedError) as unanswered:
            await handle.execute_update("turn", "next 2", result_type=str)
        result = await handle.result()

    cause = unanswered.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "TurnNotAnswered"

    assert result.saga.status is SagaState.COMPENSATED
    assert result.saga.error is not None
    assert "ConversationTampered" in result.saga.error.message
    assert "changed after it was written" in result.saga.error.message
    assert sample_tools.EFFECTS == ["set t0", "set t1", "unset t1", "unset t0"]
