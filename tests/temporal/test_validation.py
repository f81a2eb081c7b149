"""Mistakes are refused before any side effect: a saga's steps when it starts, a call's
arguments before its INTENT or its approval request."""

from __future__ import annotations

import uuid

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHistory
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import CallOutcome, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.workflow import ENGINE_VERSION
from tests.temporal import sample_tools
from tests.temporal.conftest import phases
from tests.temporal.test_bad_input import run
from workflows.order.shop import Shop


async def refused(client: Client, worker: Worker, steps: list[Step]) -> tuple[str, list[str]]:
    """Start the steps, expecting the saga to refuse them: its id and the problems it lists."""
    sid = f"invalid-{uuid.uuid4().hex[:8]}"
    with pytest.raises(WorkflowFailureError) as failed:
        await client.execute_workflow(
            STEPS_WORKFLOW,
            SagaSpec(steps=steps),
            id=sid,
            task_queue=worker.task_queue,
            result_type=SagaResult,
        )
    cause = failed.value.cause
    assert isinstance(cause, ApplicationError) and cause.type == "StepsInvalid", cause
    assert cause.non_retryable
    problems = list(cause.details[0]) if cause.details else []
    assert all(p in cause.message for p in problems)  # the message lists them all
    return sid, problems


async def nothing_journaled(journal: JournalStore, sid: str) -> None:
    assert await journal.read(sid) == []
    # not even claimed: the id is free for the corrected steps
    assert await journal.owners(saga_ids=[sid]) == []


async def test_an_unknown_tool_in_step_three_is_refused_before_step_one_runs(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, problems = await refused(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="send_note", args={"text": "hi"}),
            Step(tool="sendnote", args={"text": "again"}),
        ],
    )
    assert sample_tools.EFFECTS == []  # step one never ran
    await nothing_journaled(journal, sid)
    assert len(problems) == 1
    assert problems[0].startswith("steps[2] ('sendnote'): no tool named 'sendnote'")
    assert "did you mean 'send_note'?" in problems[0]
    assert "known tools: " in problems[0] and "set_flag" in problems[0]


async def test_refs_of_the_wrong_type_or_to_missing_fields_are_refused(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, problems = await refused(
        temporal_client,
        worker,
        [
            Step(tool="count_stock", args={"sku": "p-1"}),
            # count is an int: pydantic never makes a str of it
            Step(tool="set_flag", args={"name": {"$ref": "count_stock.count"}}),
            Step(tool="send_note", args={"text": {"$ref": "count_stock.total"}}),
            Step(tool="post_notice", args={"text": {"$ref": "count_stock.sku.upper"}}),
            Step(tool="set_flag", id="later", args={"name": {"$ref": "after.x"}}),
            Step(tool="set_flag", id="after", args={"name": "z"}),
        ],
    )
    assert sample_tools.EFFECTS == []
    await nothing_journaled(journal, sid)
    assert problems == [
        "steps[1] ('set_flag'): argument 'name': $ref 'count_stock.count' is integer, "
        "but 'set_flag' takes string there: reference a field of that type, or change the "
        "tool's annotation",
        "steps[2] ('send_note'): argument 'text': $ref 'count_stock.total': count_stock is "
        "Tally, which has no field 'total' (fields: sku, count)",
        "steps[3] ('post_notice'): argument 'text': $ref 'count_stock.sku.upper': "
        "count_stock.sku is str, which has no fields",
        "steps[4] ('later'): argument 'name': $ref 'after.x' names step 'after', which runs "
        "later: move it before this one",
    ]


async def test_a_ref_pydantic_would_coerce_is_still_refused_before_step_one_runs(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    """A sku "7" would pass as quantity 7 when the call runs, and "abc" would fail there, after
    step one took effect: the types are judged strictly, before any step runs."""
    sid, problems = await refused(
        temporal_client,
        worker,
        [
            Step(tool="count_stock", args={"sku": "7"}),
            Step(
                tool="reserve_inventory",
                args={"product_id": "p-1", "quantity": {"$ref": "count_stock.sku"}},
            ),
            Step(tool="open_account", args={"owner": "ann"}),
            # a field of a dict[str, str] result is a string, whatever its key
            Step(tool="flaky_lookup", args={"key": "k", "failures": {"$ref": "open_account.id"}}),
        ],
    )
    assert sample_tools.EFFECTS == [] and sample_tools.RECEIVED == []
    assert (await shop.snapshot()).available["p-1"] == 10
    await nothing_journaled(journal, sid)
    assert problems == [
        "steps[1] ('reserve_inventory'): argument 'quantity': $ref 'count_stock.sku' is string, "
        "but 'reserve_inventory' takes integer there: reference a field of that type, or "
        "change the tool's annotation",
        "steps[3] ('flaky_lookup'): argument 'failures': $ref 'open_account.id' is string, "
        "but 'flaky_lookup' takes integer there: reference a field of that type, or change "
        "the tool's annotation",
    ]


async def test_literal_argument_problems_are_all_listed(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, problems = await refused(
        temporal_client,
        worker,
        [
            Step(tool="reserve_inventory", args={"product_id": "p-1", "quantity": "many"}),
            Step(tool="set_flag", args={}),
            Step(tool="send_note", args={"text": "hi", "colour": "red"}),
            Step(tool="set_flag", id="twice", args={"name": "a"}),
            Step(tool="send_note", id="twice", args={"text": "b"}),
        ],
    )
    await nothing_journaled(journal, sid)
    assert (await shop.snapshot()).available["p-1"] == 10  # the tool never ran
    assert problems[0].startswith("steps[0] ('reserve_inventory'): argument 'quantity': ")
    assert "got 'many'" in problems[0]
    assert problems[1] == "steps[1] ('set_flag'): 'set_flag' needs argument 'name': add it"
    assert problems[2] == (
        "steps[2] ('send_note'): 'send_note' takes no argument 'colour': remove it, "
        "or use one of: text"
    )
    assert problems[3:] == [
        f"steps[{i}] ('twice'): id 'twice' names more than one step (steps[3], steps[4]): "
        "give each step its own id"
        for i in (3, 4)
    ]


async def test_valid_refs_still_run(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    _, result = await run(
        temporal_client,
        worker,
        [
            Step(tool="count_stock", args={"sku": "p-9"}),
            Step(tool="set_flag", args={"name": {"$ref": "count_stock.sku"}}),
            # a field of a result whose keys are not declared (dict[str, str]): its presence is
            # not checked, its type (str) is
            Step(tool="open_account", args={"owner": "ann"}),
            Step(tool="send_note", args={"text": {"$ref": "open_account.account_id"}}),
        ],
    )
    assert result.status is SagaState.COMPLETED, result.error
    assert sample_tools.EFFECTS == ["counted p-9", "set p-9", "note acc-ann"]


async def test_arguments_a_ref_makes_invalid_are_refused_before_intent(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    """A $ref to an undeclared result passes the start; its value, known only then, does not fit:
    the call is refused before its INTENT, and what ran is compensated."""
    sid, result = await run(
        temporal_client,
        worker,
        [
            Step(tool="send_note", args={"text": "hi"}),
            Step(tool="flaky_lookup", args={"key": "k", "failures": {"$ref": "send_note.text"}}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and "ToolArgumentsInvalid" in result.error.message
    assert "failures" in result.error.message
    assert sample_tools.FLAKY_CALLS == []
    assert await phases(journal, sid) == [
        ("send_note", "INTENT"),
        ("send_note", "EXECUTED"),
        ("send_note", "COMPENSATED"),
    ]


async def test_an_irreversible_call_with_invalid_arguments_asks_no_approver(
    temporal_client: Client,
    worker: Worker,
    shop: Shop,
    journal: JournalStore,
    approvals: ApprovalStore,
) -> None:
    sid, result = await run(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "w"}),
            Step(tool="send_note", args={"text": "ten"}),
            Step(tool="wire", args={"amount": {"$ref": "send_note.text"}, "api_token": "t"}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and "ToolArgumentsInvalid" in result.error.message
    assert await approvals.list(saga_id=sid) == []
    assert await phases(journal, sid) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("send_note", "INTENT"),
        ("send_note", "EXECUTED"),
        ("send_note", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]
    assert sample_tools.EFFECTS == ["set w", "note ten", "unnote ten", "unset w"]


def opening_events(history: WorkflowHistory) -> tuple[list[str], list[str]]:
    """The history's markers, and the search attributes its upserts set."""
    markers = [
        e.marker_recorded_event_attributes.marker_name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_MARKER_RECORDED
    ]
    upserted = [
        name
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES
        for name in e.upsert_workflow_search_attributes_event_attributes.search_attributes.indexed_fields
    ]
    return markers, upserted


async def test_a_new_saga_checks_its_steps_and_opens_in_its_first_call(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    """The steps check and the journal's opening ride on the first call's activity: no local
    activity, and, its spec carrying the engine version, no patch marker (nor its
    ``TemporalChangeVersion`` upsert) in its history; the catalog that call brings back holds
    only the tools its steps name (the worker serves many more)."""
    sid = f"versioned-{uuid.uuid4().hex[:8]}"
    steps = [
        Step(tool="set_flag", args={"name": "one"}),
        Step(tool="send_note", args={"text": "x"}),
    ]
    result = await temporal_client.execute_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=steps, engine_version=ENGINE_VERSION),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    assert result.status is SagaState.COMPLETED, result.error
    history = await temporal_client.get_workflow_handle(sid).fetch_history()
    markers, upserted = opening_events(history)
    assert markers == [] and "TemporalChangeVersion" not in upserted
    first = next(
        e.activity_task_completed_event_attributes
        for e in history.events
        if e.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED
    )
    (outcome,) = await temporal_client.data_converter.decode(first.result.payloads, [CallOutcome])
    assert outcome.opened is not None
    assert sorted(t.name for t in outcome.opened.tools) == ["send_note", "set_flag"]
    assert len(sample_tools.TOOLS) > 2  # the worker serves more than the steps name
    assert await phases(journal, sid) == [
        ("set_flag", "INTENT"),
        ("set_flag", "EXECUTED"),
        ("send_note", "INTENT"),
        ("send_note", "EXECUTED"),
    ]
    assert await journal.owners(saga_ids=[sid]) == [(sid, sid)]  # claimed by its workflow


async def test_a_spec_from_before_the_engine_version_decides_with_its_patch_marker(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    """A spec without ``engine_version`` (the default, an older client's, or one recorded before
    it) takes the new branch as before, through ``workflow.patched``: one marker, and Temporal's
    upsert, which a worker of the release before reads as it wrote them."""
    sid = f"old-spec-{uuid.uuid4().hex[:8]}"
    spec = SagaSpec(steps=[Step(tool="set_flag", args={"name": "old"})])
    result = await temporal_client.execute_workflow(
        STEPS_WORKFLOW, spec, id=sid, task_queue=worker.task_queue, result_type=SagaResult
    )
    assert result.status is SagaState.COMPLETED, result.error
    history = await temporal_client.get_workflow_handle(sid).fetch_history()
    markers, upserted = opening_events(history)
    assert markers == ["core_patch"] and "TemporalChangeVersion" in upserted
    assert await phases(journal, sid) == [("set_flag", "INTENT"), ("set_flag", "EXECUTED")]
