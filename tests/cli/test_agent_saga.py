"""Agent sagas in every ``sagacity saga`` command, and the worker's outcome for them: the Order
agent (scripted model) aborted while it waits for approval, against real Temporal and Postgres."""

from __future__ import annotations

import json
import logging

import pytest
from temporalio.client import Client

from sagacity.agents import AgentSagaRequest
from sagacity.observability import ObservabilityInterceptor
from sagacity.temporal.models import SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.approvals.conftest import Cli
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.agent_order.script import PROMPT
from workflows.order.shop import Shop


async def test_an_aborted_agent_saga_reads_right_in_every_command_and_the_worker_log(
    temporal_client: Client,
    agent_worker: WorkerFactory,
    shop: Shop,
    cli: Cli,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO)
    async with agent_worker(interceptors=[ObservabilityInterceptor()]) as worker:
        handle = await start_agent(
            temporal_client, worker.task_queue, AgentSagaRequest(prompt=PROMPT)
        )
        await wait_for(handle, awaiting_approval)
        running = await cli("saga", "status", handle.id)
        assert running.code == 0 and "awaiting_approval" in running.stdout, running.stderr
        aborted = await cli("saga", "abort", handle.id, "--reason", "changed my mind", "--wait")
        assert aborted.code == 1, aborted.stderr
        assert (await handle.result()).saga.status is SagaState.ABORTED

    # the worker says how the saga ended, not that the workflow returned
    # (the workflow logger appends the workflow's details in parentheses)
    ended = [
        r.getMessage().split(" (")[0] for r in caplog.records if "saga ended" in r.getMessage()
    ]
    assert ended == ["saga ended: aborted"]

    # status, from history with no worker: the agent saga's result, not a traceback
    status = await cli("saga", "status", handle.id)
    assert status.code == 1, status.stderr
    assert status.stdout.startswith(f"saga {handle.id}: aborted")
    assert "undone: create_order, reserve_inventory" in status.stdout
    assert "agent said:" in status.stdout
    document = (await cli("saga", "status", handle.id, "--json")).json()
    assert (document["state"], document["ended"]) == ("aborted", True)
    assert document["agent"]["steps"]

    journal = await cli("saga", "journal", handle.id, "--json")
    assert journal.code == 0, journal.stderr
    rows = journal.json()["rows"]
    rejected = next(r for r in rows if r["phase"] == "REJECTED")
    assert json.loads(rejected["payload"])["abort"] is True

    verified = await cli("verify", handle.id, "--temporal", "--json")
    assert verified.code == 0, verified.stdout + verified.stderr
    (temporal,) = [a for a in json.loads(verified.stdout.splitlines()[0])["anchors"]]
    assert (temporal["source"], temporal["agreement"]) == ("temporal", "agrees"), temporal
