"""Steps that fail as they run get a clear, typed error, journaled, and compensate (steps that
cannot run at all are refused at the start: test_validation.py)."""

from __future__ import annotations

import uuid

from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.store import JournalStore
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.temporal import sample_tools
from tests.temporal.conftest import phases
from workflows.order.shop import Shop


async def run(client: Client, worker: Worker, steps: list[Step]) -> tuple[str, SagaResult]:
    sid = f"bad-{uuid.uuid4().hex[:8]}"
    result = await client.execute_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=steps),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    return sid, result


async def test_sync_and_async_tools_run_and_compensate_in_reverse(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, result = await run(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="send_note", args={"text": "hi"}),
            Step(tool="explode", args={"reason": "boom"}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and "RuntimeError: boom" in result.error.message
    # a plain exception leaves the call's effect unknown: it is compensated first, told so
    assert sample_tools.EFFECTS == [
        "set a",
        "note hi",
        "unexplode failed=True result=None",
        "unnote hi",
        "unset a",
    ]
    assert (await phases(journal, sid))[-4:] == [
        ("explode", "FAILED"),
        ("explode", "COMPENSATED"),
        ("send_note", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]
    failed = (await journal.read(sid))[5]
    assert '"effect":"unknown"' in failed.payload


async def test_a_failure_declared_clean_is_not_compensated(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    for how in ("declared", "raised"):
        sample_tools.EFFECTS.clear()
        sid, result = await run(
            temporal_client,
            worker,
            [
                Step(tool="set_flag", args={"name": "b"}),
                Step(tool="decline", args={"reason": "card declined", "how": how}),
            ],
        )
        assert result.status is SagaState.COMPENSATED
        assert sample_tools.EFFECTS == ["set b", "unset b"], how
        rows = await journal.read(sid)
        assert [(r.tool_name, r.phase.value) for r in rows[2:]] == [
            ("decline", "INTENT"),
            ("decline", "FAILED"),
            ("set_flag", "COMPENSATED"),
        ]
        assert '"effect":"none"' in rows[3].payload
        assert result.needs_attention is None


async def test_unserializable_result_is_journaled_executed_and_left_to_a_human(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, result = await run(temporal_client, worker, [Step(tool="make_set")])
    assert result.error is not None and "ResultNotSerializable" in result.error.message
    rows = await journal.read(sid)
    assert rows[1].phase.value == "EXECUTED" and "unserializable_result" in rows[1].payload
    # its undo would get a stand-in for the result, not the set: it does not run, and the
    # effect is flagged (test_journaled_results.py)
    assert result.status is SagaState.COMPENSATION_FAILED
    assert rows[2].phase.value == "COMPENSATION_FAILED" and "ResultUnavailable" in rows[2].payload
    assert result.needs_attention is not None and "make_set (seq 1)" in result.needs_attention
    assert sample_tools.EFFECTS == ["made set"]


async def test_idempotent_tool_is_retried_and_journaled_once(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, result = await run(
        temporal_client, worker, [Step(tool="flaky_lookup", args={"key": "abc", "failures": 1})]
    )
    assert result.status is SagaState.COMPLETED and result.value == {"flaky_lookup": "ABC"}
    assert sample_tools.FLAKY_CALLS == ["abc", "abc"]
    assert await phases(journal, sid) == [("flaky_lookup", "INTENT"), ("flaky_lookup", "EXECUTED")]


async def test_idempotent_tool_that_keeps_failing_ends_failed_after_its_bound(
    temporal_client: Client, worker: Worker, shop: Shop, journal: JournalStore
) -> None:
    sid, result = await run(
        temporal_client,
        worker,
        [
            Step(tool="set_flag", args={"name": "f"}),
            Step(tool="flaky_lookup", args={"key": "k", "failures": 99}),
        ],
    )
    assert result.status is SagaState.COMPENSATED
    assert len(sample_tools.FLAKY_CALLS) == 3  # SagaOptions.idempotent_attempts
    # whether the lookup's last attempt did anything is unknown: it is compensated too
    assert (await phases(journal, sid))[2:] == [
        ("flaky_lookup", "INTENT"),
        ("flaky_lookup", "FAILED"),
        ("flaky_lookup", "COMPENSATED"),
        ("set_flag", "COMPENSATED"),
    ]
