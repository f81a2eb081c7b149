"""Sagacity embedded in a worker that already serves an app of its own, with plain clients.

One worker, built from Sagacity's client as docs/your-own-app.md section 5 builds it, serves the
app's workflow and activity beside the sagas. The app's clients have no codec: they still start
its workflow, signal and query it and read its result, while every payload of a saga on that
worker is encrypted in history. The ``decide`` update run with the plain ``temporal`` CLI does the
same with and without the codec server. Real Temporal and Postgres, as everywhere.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowFailureError, WorkflowHandle
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity.devstack import Endpoints
from sagacity.evidence.decisions import Signer, Statement
from sagacity.evidence.keys import load_private_key
from sagacity.settings import Settings
from sagacity.temporal.codec import ENCODING
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.models.status import SagaStatus
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import Sagacity
from tests.approvals.conftest import codec_server
from tests.approvals.test_signed import temporal
from tests.embedding import host_app, trip
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.history import payloads_in

#: events whose payloads are Temporal's bookkeeping, not Sagacity's (patch markers, visibility)
BOOKKEEPING = {
    EventType.EVENT_TYPE_MARKER_RECORDED,
    EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
}


@dataclass(frozen=True)
class Host:
    """The running worker, Sagacity's client, and a plain client of the app's own."""

    sagacity: Sagacity
    client: Client
    plain: Client
    task_queue: str


@asynccontextmanager
async def host_worker(
    settings: Settings, endpoints: Endpoints, task_queue: str
) -> AsyncIterator[Host]:
    """The app's worker with Sagacity embedded; a saga workflow of the user's own registered
    on the worker directly, as the app's are."""
    async with Sagacity.open(settings, tools=[*trip.TOOLS, host_app.send_postcard]) as sagacity:
        assert sagacity.client is not None
        worker = Worker(
            sagacity.client,
            task_queue=task_queue,
            workflows=[
                host_app.Greeter,
                trip.BookTrip,
                trip.TripOnCue,
                host_app.Launcher,
                host_app.LaunchVia,
            ],
            activities=[host_app.greet, host_app.launch],
            interceptors=sagacity.interceptors,
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        async with worker:
            plain = await Client.connect(
                endpoints.temporal_address, namespace=endpoints.temporal_namespace
            )
            yield Host(sagacity, sagacity.client, plain, task_queue)


async def test_the_apps_plain_client_keeps_working_and_a_saga_beside_it_stays_encrypted(
    app_settings: Settings, endpoints: Endpoints, task_queue: str
) -> None:
    traveler = f"ada-{uuid.uuid4().hex[:8]}"
    async with host_worker(app_settings, endpoints, task_queue) as host:
        # the app's own client, no plugin and no codec: start, query, signal, result
        greeter = await host.plain.start_workflow(
            host_app.Greeter.run,
            "ada",
            id=f"greeter-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            execution_timeout=timedelta(seconds=60),
        )
        assert await greeter.query(host_app.Greeter.joined) == []
        await greeter.signal(host_app.Greeter.join, "bob")
        assert await greeter.result() == "hello, ada and bob"
        assert await greeter.query(host_app.Greeter.joined) == ["bob"]

        # a saga of the user's own on the same worker, started through Sagacity's client
        saga = await host.client.execute_workflow(
            trip.BookTrip.run, traveler, id=f"trip-{traveler}", task_queue=task_queue
        )
        # and the app's workflow again, after the saga ran on this worker: its failure reads
        again = await host.plain.start_workflow(
            host_app.Greeter.run,
            "carol",
            id=f"greeter-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        await again.signal(host_app.Greeter.join, "")
        with pytest.raises(WorkflowFailureError) as failed:
            await again.result()
        saga_history = await host.plain.get_workflow_handle(f"trip-{traveler}").fetch_history()
        app_history = await greeter.fetch_history()

    assert isinstance(failed.value.cause, ApplicationError)
    assert (failed.value.cause.type, failed.value.cause.message) == (
        "NobodyJoined",
        "hello, carol, and nobody",
    )
    assert saga.status is SagaState.COMPENSATED
    assert f"LH400-{traveler}" not in trip.BOOKED
    # every payload of the saga's history is encrypted: its input and result, every activity's
    # input and result, the tool's failure
    sealed = {
        (EventType.Name(event.event_type), p.metadata.get("encoding"))
        for event in saga_history.events
        if event.event_type not in BOOKKEEPING
        for p in payloads_in(event)
    }
    kinds = {kind for kind, _ in sealed}
    assert {encoding for _, encoding in sealed} == {ENCODING}, sealed
    assert {
        "EVENT_TYPE_WORKFLOW_EXECUTION_STARTED",
        "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED",
        "EVENT_TYPE_ACTIVITY_TASK_COMPLETED",
        "EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED",
    } <= kinds, kinds
    # the app's history is as it was before Sagacity came: clear JSON
    assert {p.metadata.get("encoding") for e in app_history.events for p in payloads_in(e)} == {
        b"json/plain"
    }


async def postcard_awaiting_approval(
    host: Host, to: str
) -> tuple[WorkflowHandle[Any, Any], int, str]:
    """A saga sending a postcard, waiting for its approval: the handle, the seq, the input hash."""
    handle = await host.client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(
            steps=[Step(tool="send_postcard", args={"to": to, "text": "wish you were here"})],
            options=SagaOptions(),
        ),
        id=f"postcard-{uuid.uuid4().hex[:8]}",
        task_queue=host.task_queue,
        result_type=SagaResult,
    )
    pending = (await wait_for(handle, awaiting_approval)).pending_approval
    assert pending is not None
    return handle, pending.journal_seq, pending.input_hash


async def test_the_decide_update_answers_the_same_with_and_without_the_codec_endpoint(
    app_settings: Settings, endpoints: Endpoints, task_queue: str
) -> None:
    assert app_settings.approver_key is not None  # the session signs as alice
    alice = Signer(load_private_key(app_settings.approver_key))
    async with (
        host_worker(app_settings, endpoints, task_queue) as host,
        codec_server(host.client, host.sagacity.approvals) as url,
    ):
        endpoint = ("--codec-endpoint", f"{url}/codec", "--codec-auth", "Bearer tok-alice")
        for codec, to in [((), "plain-cli"), (endpoint, "codec-cli")]:
            handle, seq, input_hash = await postcard_awaiting_approval(host, to)
            decide = ("workflow", "update", "execute", "--workflow-id", handle.id)
            decision = {"journal_seq": seq, "approver": "alice", "approve": True}

            # unsigned: refused, the saga still waits, either way; the reason is a failure
            # message, encrypted, which only a CLI with the codec endpoint shows
            refused = await temporal(
                endpoints, *decide, "--name", "decide", "--input", json.dumps(decision), *codec
            )
            shown = refused.stdout + refused.stderr
            assert refused.code != 0, shown
            assert "type: ApprovalRefused" in shown
            assert ("unsigned: a keyring is configured" in shown) == bool(codec), shown
            assert (await wait_for(handle, awaiting_approval)).pending_approval is not None
            assert to not in host_app.SENT

            # signed: applied, and the CLI shows the answer
            signed = alice.sign(Statement(handle.id, seq, input_hash, "approve", "alice"))
            decision |= {"input_hash": input_hash, "signature": signed.model_dump()}
            applied = await temporal(
                endpoints, *decide, "--name", "decide", "--input", json.dumps(decision), *codec
            )
            assert applied.code == 0, applied.stderr
            assert "approved" in applied.stdout
            result = await handle.result()
            assert result.status is SagaState.COMPLETED
            assert host_app.SENT[to] == "wish you were here"


@pytest.mark.parametrize("launcher", [host_app.Launcher, host_app.LaunchVia])
async def test_a_saga_the_app_starts_under_the_id_of_its_ended_run_is_encrypted(
    app_settings: Settings, endpoints: Endpoints, task_queue: str, launcher: type
) -> None:
    """The app reuses the id of one of its own runs that just ended for a saga it starts, as a
    child or from an activity: the saga's input (the tool's arguments) is encrypted all the
    same."""
    reused = f"order-{uuid.uuid4().hex[:8]}"
    spec = SagaSpec(
        steps=[Step(tool="send_postcard", args={"to": reused, "text": "the secret plan"})],
        options=SagaOptions(),
    )
    async with host_worker(app_settings, endpoints, task_queue) as host:
        greeter = await host.plain.start_workflow(
            host_app.Greeter.run, "ada", id=reused, task_queue=task_queue
        )
        await greeter.signal(host_app.Greeter.join, "bob")
        assert await greeter.result() == "hello, ada and bob"
        await host.plain.execute_workflow(
            launcher,
            args=[reused, spec.model_dump(mode="json")],
            id=f"launcher-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
        )
        saga = host.client.get_workflow_handle(reused, result_type=SagaResult)
        await wait_for(saga, awaiting_approval)
        history = await saga.fetch_history()
        await saga.terminate("done")
    started = history.events[0].workflow_execution_started_event_attributes
    assert [p.metadata.get("encoding") for p in started.input.payloads] == [ENCODING]


async def test_a_saga_of_the_apps_own_reads_sealed_before_its_first_call(
    app_settings: Settings, endpoints: Endpoints, task_queue: str
) -> None:
    """A workflow of the user's own registered on the worker directly is Sagacity's from the
    moment it makes a Saga: its status reads sealed before any of its calls ran."""
    async with host_worker(app_settings, endpoints, task_queue) as host:
        handle = await host.client.start_workflow(
            trip.TripOnCue.run, "ada", id=f"cue-{uuid.uuid4().hex[:8]}", task_queue=task_queue
        )
        status = await handle.query("status", result_type=SagaStatus)
        assert status.executed == []
        with pytest.raises(KeyError, match="binary/encrypted"):
            await host.plain.get_workflow_handle(handle.id).query("status")
        await handle.signal(trip.TripOnCue.cue)
        result = await handle.result()
    assert result.status is SagaState.COMPLETED
