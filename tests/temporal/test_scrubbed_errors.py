"""Exception text is scrubbed before it is journaled or returned: a tool that fails with its
request's credentials in the message leaves none of them in the journal, the saga's result, its
``status`` query, its Temporal history, or the logs Sagacity writes."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import uuid
from typing import Any

import psycopg
import pytest
from temporalio.client import Client, WorkflowHandle
from temporalio.worker import Worker

from sagacity.temporal.models import (
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals.conftest import Cli, cli
from tests.temporal import sample_tools
from tests.temporal.history import decrypted
from workflows.order.shop import Shop

__all__ = ["cli"]


async def start_leaks(
    client: Client, worker: Worker, sid: str, *, compensation_attempts: int
) -> WorkflowHandle[Any, SagaResult]:
    """A saga of two ``leak`` calls, the second failing: the first's undo fails each attempt."""
    return await client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[Step(tool="leak", args={"fail": False}), Step(tool="leak", args={"fail": True})],
            options=SagaOptions(
                compensation_attempts=compensation_attempts, compensation_backoff_s=0.1
            ),
        ),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )


def leaks(text: str) -> list[str]:
    return [secret for secret in sample_tools.LEAKED_SECRETS if secret in text]


async def history_json(client: Client, handle: WorkflowHandle[Any, Any]) -> str:
    """The saga's history as JSON as the codec's key holder reads it, each payload's data
    decoded from base64 where it sits."""
    clear = await decrypted(await handle.fetch_history(), client.data_converter.payload_codec)
    history = json.loads(clear.to_json())

    def decode(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: base64.b64decode(item).decode()
                if key == "data" and isinstance(item, str)
                else decode(item)
                for key, item in node.items()
            }
        return [decode(item) for item in node] if isinstance(node, list) else node

    return json.dumps(decode(history))


async def journaled(database_url: str, saga_id: str) -> list[tuple[str, str, str]]:
    """The saga's rows as Postgres holds them: phase, input, payload."""
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        cur = await conn.execute(
            "SELECT phase, input, payload FROM side_effect_journal WHERE saga_id = %s ORDER BY seq",
            (saga_id,),
        )
        return [(str(p), str(i), str(pl)) for p, i, pl in await cur.fetchall()]


async def test_failed_call_and_failed_compensations_are_scrubbed(
    temporal_client: Client,
    worker: Worker,
    shop: Shop,
    database_url: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    sid = f"scrub-{uuid.uuid4().hex[:8]}"
    handle = await start_leaks(temporal_client, worker, sid, compensation_attempts=2)
    result = await handle.result()

    assert result.status is SagaState.COMPENSATION_FAILED, result
    rows = await journaled(database_url, sid)
    assert [phase for phase, _, _ in rows] == [
        "INTENT",
        "EXECUTED",
        "INTENT",
        "FAILED",
        "COMPENSATION_FAILED",
        "COMPENSATION_FAILED",
    ]
    failed = rows[3][2]
    # what the message said is kept, what it held is not
    assert "https://[redacted]@api.example.com/v1?api_key=[redacted]&page=2" in failed
    assert "'Authorization': '[redacted]'" in failed and "'X-Request-Id': 'r-1'" in failed
    assert "password=[redacted], token=[redacted]" in rows[4][2]
    assert leaks(repr(rows)) == []
    assert result.error is not None and "api_key=[redacted]" in result.error.message
    assert leaks(result.model_dump_json()) == []
    status = await handle.query("status", result_type=SagaStatus)
    assert leaks(status.model_dump_json()) == []
    history = await history_json(temporal_client, handle)
    # the failures themselves, and the outcomes and rows the workflow was given
    assert "undo refused" in history and "'X-Request-Id': 'r-1'" in history
    assert leaks(history) == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "undo refused" in logged and leaks(logged) == []


async def test_a_retried_idempotent_call_leaves_no_secret_in_history(
    temporal_client: Client, worker: Worker, shop: Shop, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sample_tools.LEAK_CALLS.clear()
    sid = f"scrub-retry-{uuid.uuid4().hex[:8]}"
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="leak_once", args={"key": "k"})]),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    result = await handle.result()

    assert result.status is SagaState.COMPLETED and len(sample_tools.LEAK_CALLS) == 2
    # the first attempt's failure is kept in history with the second attempt's start
    history = await history_json(temporal_client, handle)
    assert "api_key=[redacted]" in history and leaks(history) == []
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert leaks(logged) == []


async def test_status_shows_a_compensation_being_retried_and_its_scrubbed_error(
    temporal_client: Client, worker: Worker, cli: Cli
) -> None:
    """A compensation that keeps failing shows in ``saga status`` while it is retried, with its
    last error (scrubbed as everywhere), not only as ``compensating``."""
    sid = f"retried-{uuid.uuid4().hex[:8]}"
    handle = await start_leaks(temporal_client, worker, sid, compensation_attempts=100)
    try:
        said = ""
        for _ in range(100):
            shown = await cli("saga", "status", sid)
            said = shown.stdout
            if "last error:" in said:
                break
            await asyncio.sleep(0.2)
        assert f"saga {sid}: compensating" in said, said
        line = next(x for x in said.splitlines() if "last error:" in x)
        assert line.startswith("  compensating: leak (seq 3), attempt "), line
        assert "ConnectionError: undo refused: password=[redacted]" in line, line
        assert not leaks(said + shown.stderr), said
    finally:
        await handle.terminate("test over")
