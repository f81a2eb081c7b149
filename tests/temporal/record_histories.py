"""Record the replay corpus: each path a saga can take, run for real, its history saved as JSON.

    python -m tests.temporal.record_histories                 # record the paths with no file yet
    python -m tests.temporal.record_histories --only NAME     # just this path (repeatable)
    python -m tests.temporal.record_histories --list          # the paths and their files
    python -m tests.temporal.record_histories --only order_approved --tag my-patch
                                                # order_approved@my-patch.json, beside the old one

It runs on the same stack as the tests: the embedded Postgres and an in-memory Temporal dev
server, or the servers ``SAGACITY_DATABASE_URL`` / ``TEMPORAL_ADDRESS`` name (a running
``sagacity dev``, say). Each run works in a fresh database ``sagacity_record_<random>``, dropped
at the end. Sagas run on in-process workers set up like ``sagacity worker``, signing checkpoints
(and sealing ended sagas) with a key of the run's own; the SUSPECT paths kill a worker process
with SIGKILL mid-call, as tests/temporal/test_crash.py does.

Each path checks that its saga took the path (a recording that went elsewhere is an error), saves
``histories/<path>.json`` (a path with several runs: ``<path>-run1.json``, ...) and replays it at
once; a history today's code cannot replay is not saved (it goes to a temporary file, named in
the log). A committed history is never re-recorded: it is the proof that sagas started on the
code it was recorded from still replay. Existing files are kept unless ``--force``; record a
path again after a change with ``--tag`` (see docs/versioning.md). Record from a clean checkout
of a commit (``git worktree add``), so that every history comes from code that was committed.
To add a path, write a function below with ``@recording("name")`` and run the recorder with
``--only name``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import psycopg
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowHistory,
    WorkflowUpdateFailedError,
    WorkflowUpdateStage,
)
from temporalio.common import RawValue
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from sagacity.agents import AGENT_WORKFLOW as AGENT_WORKFLOW
from sagacity.agents import (
    AgentSagaRequest,
    AgentSagaResult,
    Call,
    Say,
    Script,
    ScriptedModelProvider,
    agent_plugins,
    with_plugins,
)
from sagacity.devkeys import ensure_dev_approvers
from sagacity.devstack import DevStack, Endpoints
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Policy, Signer, Statement, load_keyring
from sagacity.mcp.session import (
    MCP_SESSION_WORKFLOW,
    McpCall,
    McpEnd,
    McpSessionRequest,
    McpSessionWorkflow,
)
from sagacity.observability import ObservabilityInterceptor
from sagacity.settings import load_settings
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.halts import HaltKind, HaltPolicy, HaltScope, HaltStore
from sagacity.store.migrate import migrate
from sagacity.temporal.models import (
    Abort,
    Approve,
    Decision,
    HaltNotice,
    Reject,
    Resolve,
    Resume,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.tools import CompensableTool
from tests.approvals import quorum_app, refund_app
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, phases, wait_for
from tests.temporal.replay import (
    HISTORIES,
    KNOWN_NONDETERMINISTIC,
    ReplayFailed,
    history_files,
    patch_markers,
    replay,
)
from tests.temporal.test_crash import WorkerProcess
from tests.temporal.test_operations import reset_after_first_call
from workflows.order import app as order_app
from workflows.order.shop import Shop, use
from workflows.order.workflows import OrderRequest

log = logging.getLogger("record_histories")

TOOLS = cast(
    list[CompensableTool[..., Any]],
    [*order_app.TOOLS, *sample_tools.TOOLS, *refund_app.TOOLS, quorum_app.wire_funds],
)

#: the scripted model of the agent paths (short: every model call carries the tools' schemas)
SCRIPTS = {
    "one": Script(turns=[[Call("set_flag", {"name": "a"}), Say("flag a is set")]]),
    "chat": Script(
        turns=[
            [Call("set_flag", {"name": "a"}), Say("flag a is set")],
            [Call("send_note", {"text": "hi"}), Say("note sent")],
        ]
    ),
    "chat3": Script(
        turns=[
            [Call("set_flag", {"name": "a"}), Say("flag a is set")],
            [Call("send_note", {"text": "hi"}), Say("note sent")],
            [Call("set_flag", {"name": "b"}), Say("flag b is set")],
        ]
    ),
    "fails": Script(
        turns=[
            [Call("set_flag", {"name": "a"}), Call("explode", {"reason": "disk full"}), Say("no")],
            [Say("the flag was taken down again")],
        ]
    ),
}


class RecordingError(RuntimeError):
    """A saga did not take the path it was started for."""


def expect(ok: bool, what: str) -> None:
    if not ok:
        raise RecordingError(what)


@dataclass
class Rig:
    """What a path records with: a client, the in-process workers' task queues, the shop."""

    client: Client
    endpoints: Endpoints
    database_url: str
    journal: JournalStore
    shop: Shop
    queue: str  # the saga worker: sagacity.Steps and order.PlaceOrder
    agent_queue: str  # the agent worker: sagacity.AgentSaga
    scratch: Path
    #: a saga worker with a keyring (alice's key) and a policy, as `sagacity dev` sets one up
    signed_queue: str
    signer: Signer

    async def order(
        self,
        name: str,
        options: SagaOptions | None = None,
        *,
        task_queue: str | None = None,
        saga_id: str | None = None,
    ) -> WorkflowHandle[Any, SagaResult]:
        return await self.client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(options=options or SagaOptions()),
            id=saga_id or self.new_id(name),
            task_queue=task_queue or self.queue,
            result_type=SagaResult,
        )

    def new_id(self, name: str) -> str:
        return f"rec-{name.replace('_', '-')}-{uuid.uuid4().hex[:6]}"

    async def steps(
        self,
        name: str,
        steps: list[Step],
        options: SagaOptions | None = None,
        *,
        saga_id: str | None = None,
        task_queue: str | None = None,
    ) -> WorkflowHandle[Any, SagaResult]:
        return await self.client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(steps=steps, options=options or SagaOptions()),
            id=saga_id or self.new_id(name),
            task_queue=task_queue or self.queue,
            result_type=SagaResult,
        )

    async def agent(self, name: str, request: AgentSagaRequest) -> WorkflowHandle[Any, Any]:
        return await self.client.start_workflow(
            AGENT_WORKFLOW,
            request,
            id=self.new_id(name),
            task_queue=self.agent_queue,
            result_type=AgentSagaResult,
        )


Recorder = Callable[[Rig], Awaitable[dict[str, WorkflowHistory]]]


@dataclass(frozen=True)
class Recording:
    name: str
    about: str
    record: Recorder
    #: a path today's code cannot replay (an engine bug): kept apart, see test_replay.py
    nondeterministic: bool = False

    @property
    def directory(self) -> Path:
        return KNOWN_NONDETERMINISTIC if self.nondeterministic else HISTORIES


PATHS: dict[str, Recording] = {}


def recording(name: str, *, nondeterministic: bool = False) -> Callable[[Recorder], Recorder]:
    """Register a recorder: it runs one saga down one path and returns its histories.

    ``nondeterministic``: the path's history does not replay on today's code, because of an
    engine bug; it is saved under histories/known_nondeterministic/ without the replay check.
    """

    def register(fn: Recorder) -> Recorder:
        about = (fn.__doc__ or "").strip().splitlines()[0]
        PATHS[name] = Recording(name, about, fn, nondeterministic)
        return fn

    return register


async def one(handle: WorkflowHandle[Any, Any], name: str) -> dict[str, WorkflowHistory]:
    return {name: await handle.fetch_history()}


async def result(handle: WorkflowHandle[Any, SagaResult], state: SagaState) -> SagaResult:
    done = await asyncio.wait_for(handle.result(), 60)
    expect(done.status is state, f"{handle.id} ended {done.status}, not {state}: {done.error}")
    return done


async def gate(handle: WorkflowHandle[Any, Any]) -> int:
    """Wait for the saga to stop at its approval gate; the request's seq."""
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    return status.pending_approval.journal_seq


# -- the generic workflow, sagacity.Steps ------------------------------------------------------
# (histories recorded before its rename carry its former type, sagacity.Saga, and replay on the
# deprecated SagaWorkflow registered under it)


@recording("saga_completed")
async def saga_completed(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: two calls, the second given the first's result ($ref); completed."""
    handle = await rig.steps(
        "saga_completed",
        [
            Step(tool="set_flag", args={"name": "r"}),
            Step(tool="send_note", args={"text": {"$ref": "set_flag"}}),
        ],
    )
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "saga_completed")


@recording("saga_compensated")
async def saga_compensated(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: the second call fails (effect unknown); both undone, newest first."""
    handle = await rig.steps(
        "saga_compensated",
        [Step(tool="set_flag", args={"name": "c"}), Step(tool="explode", args={"reason": "no"})],
    )
    done = await result(handle, SagaState.COMPENSATED)
    expect([e.tool_name for e in done.compensated] == ["explode", "set_flag"], str(done))
    return await one(handle, "saga_compensated")


@recording("saga_compensation_failed")
async def saga_compensation_failed(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: a call fails and one compensation keeps failing: COMPENSATION_FAILED."""
    await rig.shop.arm_fault("release_inventory", "warehouse offline", times=-1)
    handle = await rig.steps(
        "saga_compensation_failed",
        [
            Step(tool="reserve_inventory", args={"product_id": "p-1", "quantity": 1}),
            Step(tool="explode", args={"reason": "no"}),
        ],
        SagaOptions(compensation_attempts=1),
    )
    await result(handle, SagaState.COMPENSATION_FAILED)
    journaled = await phases(rig.journal, handle.id)
    expect(journaled[-1] == ("reserve_inventory", "COMPENSATION_FAILED"), str(journaled))
    return await one(handle, "saga_compensation_failed")


@recording("saga_tool_name_refused")
async def saga_tool_name_refused(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: the journal refuses a tool name (NUL), no INTENT; the first call undone.

    Recorded before ``sagacity-validate-steps``: such steps are now refused at the start.
    """
    handle = await rig.steps(
        "saga_tool_name_refused",
        [Step(tool="set_flag", args={"name": "n"}), Step(tool="bad\x00name", args={})],
    )
    done = await result(handle, SagaState.COMPENSATED)
    expect(done.error is not None and "InvalidEntry" in done.error.message, str(done.error))
    return await one(handle, "saga_tool_name_refused")


@recording("saga_steps_refused")
async def saga_steps_refused(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: steps naming an unknown tool are refused (StepsInvalid) before any runs."""
    handle = await rig.steps(
        "saga_steps_refused",
        [Step(tool="set_flag", args={"name": "v"}), Step(tool="launch_rocket", args={})],
    )
    try:
        await asyncio.wait_for(handle.result(), 60)
    except WorkflowFailureError as exc:
        cause = exc.cause
        expect(isinstance(cause, ApplicationError) and cause.type == "StepsInvalid", repr(cause))
    else:
        raise RecordingError("the steps were not refused")
    expect(await phases(rig.journal, handle.id) == [], "a refused saga journaled rows")
    return await one(handle, "saga_steps_refused")


@recording("saga_first_call_gated")
async def saga_first_call_gated(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: the first step's tool is IRREVERSIBLE, so the call that opens the journal
    brings back the open alone (the tool does not run); the saga asks for approval, then calls."""
    handle = await rig.steps(
        "saga_first_call_gated",
        [
            Step(tool="wire", args={"amount": 4, "api_token": "tok-g"}),
            Step(tool="set_flag", args={"name": "g"}),
        ],
    )
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    expect(
        await phases(rig.journal, handle.id)
        == [
            ("wire", "AWAITING_APPROVAL"),
            ("approval-gate", "APPROVED"),
            ("wire", "INTENT"),
            ("wire", "EXECUTED"),
            ("set_flag", "INTENT"),
            ("set_flag", "EXECUTED"),
        ],
        "the first call was not gated",
    )
    return await one(handle, "saga_first_call_gated")


@recording("saga_rule_gated")
async def saga_rule_gated(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: a REVERSIBLE refund whose needs_approval rule (amount > 1000) matches
    waits (the first call: the open comes back alone), is approved and runs; one of 500 runs
    unasked; completed."""
    handle = await rig.steps(
        "saga_rule_gated",
        [
            Step(tool="refund", args={"order_id": "o-r1", "amount": 1500}),
            Step(tool="refund", args={"order_id": "o-r2", "amount": 500}),
        ],
    )
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    expect(
        await phases(rig.journal, handle.id)
        == [
            ("refund", "AWAITING_APPROVAL"),
            ("approval-gate", "APPROVED"),
            ("refund", "INTENT"),
            ("refund", "EXECUTED"),
            ("refund", "INTENT"),
            ("refund", "EXECUTED"),
        ],
        "the rule did not gate the refund over 1000 alone",
    )
    return await one(handle, "saga_rule_gated")


@recording("saga_quorum")
async def saga_quorum(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: a wire under ApprovalPolicy(required=2, starter_may_approve=False),
    started by dave: alice's approval by update ``decide`` is counted ("approved 1 of 2"), hers
    again and dave's refused, bob's by signal completes it; the wire ran once; completed."""
    handle = await rig.steps(
        "saga_quorum",
        [Step(tool="wire_funds", args={"order_id": "o-q1", "amount": 900})],
        SagaOptions(started_by="dave"),
    )
    seq = await gate(handle)
    first = Decision(journal_seq=seq, approver="alice", approve=True)
    answer = await handle.execute_update("decide", first, result_type=str)
    expect(answer == "approved 1 of 2", answer)
    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    await handle.signal("approve", Approve(journal_seq=seq, approver="dave"))
    await wait_for(handle, lambda s: len(s.refused_decisions) == 2)
    await handle.signal("approve", Approve(journal_seq=seq, approver="bob"))
    await result(handle, SagaState.COMPLETED)
    expect(
        await phases(rig.journal, handle.id)
        == [
            ("wire_funds", "AWAITING_APPROVAL"),
            ("approval-gate", "APPROVED"),
            ("wire_funds", "INTENT"),
            ("wire_funds", "EXECUTED"),
        ],
        "the quorum did not gate the wire",
    )
    return await one(handle, "saga_quorum")


@recording("saga_queried_at_start")
async def saga_queried_at_start(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Saga: status queried as it starts, which ends its first workflow task early."""
    handle = await rig.steps(
        "saga_queried_at_start",
        [
            Step(tool="set_flag", args={"name": "q"}),
            Step(tool="wire", args={"amount": 3, "api_token": "tok-q"}),
        ],
    )

    async def ask() -> None:
        # as fast as answers come: one lands while the saga's first task runs
        with contextlib.suppress(Exception):
            await handle.query("status", result_type=SagaStatus)

    await asyncio.gather(*(ask() for _ in range(20)))
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    history = await handle.fetch_history()
    before_first_call = []
    for event in history.events:
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            break
        before_first_call.append(event.event_type)
    # what this path is for: the local activities that open the saga span workflow tasks
    tasks = before_first_call.count(EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED)
    expect(tasks > 1, "the queries did not end the first workflow task early; record again")
    return {"saga_queried_at_start": history}


@recording("saga_id_reused")
async def saga_id_reused(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: a new run under a used saga id is refused (SagaIdTaken), runs nothing."""
    steps = [Step(tool="set_flag", args={"name": "x"})]
    first = await rig.steps("saga_id_reused", steps)
    await result(first, SagaState.COMPLETED)
    again = await rig.steps("saga_id_reused", steps, saga_id=first.id)
    try:
        await asyncio.wait_for(again.result(), 60)
    except WorkflowFailureError as exc:
        cause = exc.cause
        expect(isinstance(cause, ApplicationError) and cause.type == "SagaIdTaken", repr(cause))
    else:
        raise RecordingError("the reused id was not refused")
    return await one(again, "saga_id_reused")


@recording("saga_reset")
async def saga_reset(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: a compensated saga reset after its first call; the reset run's history.

    The new run finds the journal ahead of it, re-reads it and goes on from its head.
    """
    handle = await rig.steps(
        "saga_reset",
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="send_note", args={"text": "b"}),
            Step(tool="decline", args={"reason": "no"}),
        ],
    )
    await result(handle, SagaState.COMPENSATED)
    run_id = await reset_after_first_call(rig.client, handle)
    again = rig.client.get_workflow_handle(handle.id, run_id=run_id, result_type=SagaResult)
    await result(again, SagaState.COMPENSATED)
    return await one(again, "saga_reset")


@recording("saga_reset_redacted")
async def saga_reset_redacted(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: reset after its first call, the journal ahead holds an approved call whose
    token it redacted; the reset run's history.

    The new run takes that call from the journal (equal but for the marker) instead of asking
    for its approval again.
    """
    handle = await rig.steps(
        "saga_reset_redacted",
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="wire", args={"amount": 5, "api_token": "tok-123"}),
        ],
    )
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    run_id = await reset_after_first_call(rig.client, handle)
    again = rig.client.get_workflow_handle(handle.id, run_id=run_id, result_type=SagaResult)
    await result(again, SagaState.COMPLETED)
    return await one(again, "saga_reset_redacted")


@recording("saga_cancelled_mid_call")
async def saga_cancelled_mid_call(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: a Temporal cancel while a call runs; the call finishes, then all undone."""
    handle = await rig.steps(
        "saga_cancelled_mid_call",
        [
            Step(tool="set_flag", args={"name": "a"}),
            Step(tool="slow_note", args={"text": "b", "seconds": 2}),
            Step(tool="set_flag", args={"name": "never"}),
        ],
    )
    await wait_for(handle, lambda s: s.running == "slow_note")
    await handle.cancel()
    done = await result(handle, SagaState.ABORTED)
    expect([e.tool_name for e in done.compensated] == ["slow_note", "set_flag"], str(done))
    return await one(handle, "saga_cancelled_mid_call")


@recording("saga_continued_as_new")
async def saga_continued_as_new(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: continues as new between calls and mid-compensation; every run's history."""
    handle = await rig.steps(
        "saga_continued_as_new",
        [
            *(Step(tool="set_flag", args={"name": f"f{i}"}, id=f"f{i}") for i in range(9)),
            Step(tool="explode", args={"reason": "stop here"}),
        ],
        SagaOptions(continue_as_new_events=50),
    )
    await result(handle, SagaState.COMPENSATED)
    runs = await chain(rig, handle, "saga_continued_as_new")
    expect(len(runs) >= 3, f"{len(runs)} run(s): no continue-as-new mid-compensation")
    return runs


async def chain(
    rig: Rig, handle: WorkflowHandle[Any, Any], name: str
) -> dict[str, WorkflowHistory]:
    """Every run of the chain ``handle`` started, first run first, as ``<name>-run<n>``."""
    runs: dict[str, WorkflowHistory] = {}
    run_id: str | None = handle.first_execution_run_id or handle.result_run_id
    while run_id:
        this_run = rig.client.get_workflow_handle(handle.id, run_id=run_id)
        history = await this_run.fetch_history()
        runs[f"{name}-run{len(runs) + 1}"] = history
        last = history.events[-1]
        run_id = None
        if last.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
            run_id = last.workflow_execution_continued_as_new_event_attributes.new_execution_run_id
    return runs


async def _suspect(
    rig: Rig, name: str, resolve: Callable[[int], Resolve], *, at_once: bool = False
) -> tuple[WorkflowHandle[Any, SagaResult], SagaResult]:
    """Kill the worker process while create_order runs; resolve the SUSPECT call it leaves.

    ``at_once``: resolve as soon as the ``status`` query shows SUSPECT, as ``sagacity saga
    resolve`` does. The new worker answers the query by applying the call's failure before a
    workflow task has taken it (the one scheduled on the dead worker's sticky queue waits out
    its timeout), so the signal and the failure share the next workflow task, and a worker
    replaying the history gets both in one activation, the signal first. Otherwise wait until a
    task has taken the failure: the resolution comes in a task of its own.
    """
    queue = f"record-suspect-{uuid.uuid4().hex[:8]}"
    worker = WorkerProcess(rig.endpoints, rig.database_url, queue, rig.scratch / f"{name}.log")
    await worker.start()
    try:
        await rig.shop.arm_fault("create_order", "", delay_s=60)  # hangs before any effect
        handle = await rig.steps(
            name,
            [
                Step(tool="reserve_inventory", args={"product_id": "p-1", "quantity": 1}),
                Step(
                    tool="create_order",
                    args={
                        "product_id": "p-1",
                        "quantity": 1,
                        "reservation_id": {"$ref": "reserve_inventory.reservation_id"},
                    },
                ),
            ],
            SagaOptions(heartbeat_timeout_s=2),
            task_queue=queue,
        )
        for _ in range(300):
            if ("create_order", "INTENT") in await phases(rig.journal, handle.id):
                break
            await asyncio.sleep(0.1)
        else:
            raise RecordingError("create_order never started")
        worker.kill()
        await worker.start()
        status = await wait_for(handle, lambda s: s.state is SagaState.SUSPECT, timeout=60)
        suspect = status.suspect
        if suspect is None or suspect.tool_name != "create_order":
            raise RecordingError(f"SUSPECT, but not create_order: {suspect}")
        if not at_once:
            await task_completed_after(handle, EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED)
        await handle.signal("resolve", resolve(suspect.call_seq))
        done = await asyncio.wait_for(handle.result(), 60)
        shared = shares_a_task(
            await handle.fetch_history(), EventType.EVENT_TYPE_ACTIVITY_TASK_FAILED, "resolve"
        )
        expect(shared == at_once, f"the resolution shared a task with the failure: {shared}")
        return handle, done
    finally:
        worker.stop()


async def task_completed_after(handle: WorkflowHandle[Any, Any], kind: EventType.ValueType) -> None:
    """Wait until a workflow task has completed after the last event of ``kind``."""
    for _ in range(300):
        kinds = [event.event_type async for event in handle.fetch_history_events()]
        if kind in kinds:
            last = len(kinds) - 1 - kinds[::-1].index(kind)
            if EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED in kinds[last:]:
                return
        await asyncio.sleep(0.1)
    raise RecordingError(f"no workflow task completed after {EventType.Name(kind)}")


def shares_a_task(history: WorkflowHistory, after: EventType.ValueType, signal: str) -> bool:
    """Whether signal ``signal`` arrived after an event ``after`` and before a task took it."""
    pending = False
    for event in history.events:
        if event.event_type == after:
            pending = True
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_STARTED:
            pending = False
        elif (
            pending
            and event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
            and event.workflow_execution_signaled_event_attributes.signal_name == signal
        ):
            return True
    return False


@recording("saga_suspect_happened")
async def saga_suspect_happened(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: the worker dies mid-call, SUSPECT; a human says it happened; completed."""
    order = {"order_id": "ord-by-hand", "product_id": "p-1", "quantity": 1}
    handle, done = await _suspect(
        rig,
        "saga_suspect_happened",
        lambda seq: Resolve(call_seq=seq, resolver="dave", happened=True, result=order),
    )
    expect(done.status is SagaState.COMPLETED, str(done))
    return await one(handle, "saga_suspect_happened")


@recording("saga_suspect_did_not_happen")
async def saga_suspect_did_not_happen(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: the worker dies mid-call, SUSPECT; it did not happen; compensated."""
    handle, done = await _suspect(
        rig,
        "saga_suspect_did_not_happen",
        lambda seq: Resolve(call_seq=seq, resolver="dave", happened=False),
    )
    expect(done.status is SagaState.COMPENSATED, str(done))
    return await one(handle, "saga_suspect_did_not_happen")


@recording("saga_suspect_resolved_with_its_failure")
async def saga_suspect_resolved_with_its_failure(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.Steps: SUSPECT, resolved the moment a query shows it, in the failure's task."""
    handle, done = await _suspect(
        rig,
        "saga_suspect_resolved_with_its_failure",
        lambda seq: Resolve(call_seq=seq, resolver="dave", happened=False),
        at_once=True,
    )
    expect(done.status is SagaState.COMPENSATED, str(done))
    return await one(handle, "saga_suspect_resolved_with_its_failure")


# -- the hand-written Order workflow, order.PlaceOrder -------------------------------------------


@recording("order_approved")
async def order_approved(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: the confirmation approved by signal ``approve``; completed."""
    handle = await rig.order("order_approved")
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_approved")


@recording("order_approved_by_update")
async def order_approved_by_update(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: approved by update ``decide`` (answered once journaled); completed."""
    handle = await rig.order("order_approved_by_update")
    decision = Decision(journal_seq=await gate(handle), approver="alice", approve=True)
    answer = await handle.execute_update("decide", decision, result_type=str)
    expect(answer == "approved", answer)
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_approved_by_update")


@recording("order_approved_with_changes")
async def order_approved_with_changes(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: an edit that does not fit refused (update ``decide``, invalid_edit),
    then approved with changed arguments by signal ``approve``; the edited call ran."""
    handle = await rig.order("order_approved_with_changes")
    seq = await gate(handle)
    unfit = Decision(journal_seq=seq, approver="alice", approve=True, args={"order_id": 5})
    with contextlib.suppress(WorkflowUpdateFailedError):
        await handle.execute_update("decide", unfit, result_type=str)
        expect(False, "an edit that does not fit the tool was taken")
    edited = Approve(journal_seq=seq, approver="alice", args={"order_id": "ord-edited"})
    await handle.signal("approve", edited)
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_approved_with_changes")


@recording("order_rejected")
async def order_rejected(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: the confirmation rejected by signal ``reject``; compensated."""
    handle = await rig.order("order_rejected")
    seq = await gate(handle)
    await handle.signal("reject", Reject(journal_seq=seq, approver="bob", reason="wrong address"))
    await result(handle, SagaState.COMPENSATED)
    return await one(handle, "order_rejected")


@recording("order_approval_timeout")
async def order_approval_timeout(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: nobody decides before the deadline (1 s); rejected as timeout."""
    handle = await rig.order("order_approval_timeout", SagaOptions(approval_deadline_s=1))
    await result(handle, SagaState.COMPENSATED)
    rows = await rig.journal.read(handle.id)
    expect('"reason":"timeout"' in rows[5].payload, rows[5].payload)
    return await one(handle, "order_approval_timeout")


@recording("order_escalated_approved")
async def order_escalated_approved(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: undecided past its SLA (1 s), escalated once (no webhook: recorded),
    then approved by signal ``approve``; completed."""
    handle = await rig.order("order_escalated_approved", SagaOptions(approval_sla_s=1))
    seq = await gate(handle)
    status = await wait_for(
        handle,
        lambda s: s.pending_approval is not None and s.pending_approval.escalation is not None
        and s.pending_approval.escalation.outcome == "recorded",
    )  # fmt: skip
    expect(status.state is SagaState.AWAITING_APPROVAL, status.state)
    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    await result(handle, SagaState.COMPLETED)
    rows = await rig.journal.read(handle.id)
    expect('"escalated"' in rows[seq].payload, rows[seq].payload)
    return await one(handle, "order_escalated_approved")


@recording("order_aborted")
async def order_aborted(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: signal ``abort`` at the approval gate; aborted, all undone."""
    handle = await rig.order("order_aborted")
    await gate(handle)
    await handle.signal("abort", Abort(reason="customer changed their mind", by="carol"))
    await result(handle, SagaState.ABORTED)
    return await one(handle, "order_aborted")


@recording("order_cancelled")
async def order_cancelled(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: a Temporal cancel at the approval gate; aborted, all undone."""
    handle = await rig.order("order_cancelled")
    await gate(handle)
    await handle.cancel()
    done = await result(handle, SagaState.ABORTED)
    expect(done.error is not None and done.error.type == "SagaCancelled", str(done.error))
    return await one(handle, "order_cancelled")


async def halted(
    rig: Rig, handle: WorkflowHandle[Any, Any], kind: HaltKind, policy: HaltPolicy
) -> int:
    """Halt (or quarantine) the saga as ``sagacity halt`` does: the gate, then the signal."""
    halt = await HaltStore(rig.journal.pool).halt(
        kind=kind,
        scope=HaltScope(sagas=(handle.id,)),
        policy=policy,
        reason="recorded",
        operator="olivia",
        signature=None,
    )
    notice = HaltNotice(halt_id=halt.id, kind=kind, policy=policy, operator="olivia")
    await handle.signal("halt", notice.model_dump(mode="json", exclude_none=True))
    return halt.id


async def resumed(rig: Rig, handle: WorkflowHandle[Any, Any], halt_id: int) -> None:
    await HaltStore(rig.journal.pool).lift(halt_id, by="olivia", reason="done", signature=None)
    await handle.signal("resume", Resume(halt_id=halt_id, operator="olivia"))


@recording("order_halted_resumed")
async def order_halted_resumed(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: halted mid-call (keep), held before its next call, resumed; completed."""
    await rig.shop.arm_fault("reserve_inventory", "", delay_s=2.0)
    handle = await rig.order("order_halted_resumed")
    await wait_for(handle, lambda s: s.running == "reserve_inventory")
    halt_id = await halted(rig, handle, "halt", "keep")
    await wait_for(handle, lambda s: s.state is SagaState.HALTED)
    await resumed(rig, handle, halt_id)
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_halted_resumed")


@recording("order_halted_compensate")
async def order_halted_compensate(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: halted mid-call with the compensate policy; aborted, all undone."""
    await rig.shop.arm_fault("reserve_inventory", "", delay_s=2.0)
    handle = await rig.order("order_halted_compensate")
    await wait_for(handle, lambda s: s.running == "reserve_inventory")
    await halted(rig, handle, "halt", "compensate")
    await result(handle, SagaState.ABORTED)
    return await one(handle, "order_halted_compensate")


@recording("order_halt_refused")
async def order_halt_refused(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: a ``halt`` signal (compensate) naming no halt in force, mid-call:
    looked up in the halt store, refused; the saga goes on and completes."""
    await rig.shop.arm_fault("reserve_inventory", "", delay_s=2.0)
    handle = await rig.order("order_halt_refused")
    await wait_for(handle, lambda s: s.running == "reserve_inventory")
    notice = HaltNotice(halt_id=999_999, policy="compensate", operator="mallory")
    await handle.signal("halt", notice.model_dump(mode="json", exclude_none=True))
    refused = await wait_for(handle, lambda s: bool(s.refused_decisions))
    expect("halt 999999 refused" in refused.refused_decisions[0], str(refused))
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_halt_refused")


@recording("order_halted_while_compensating")
async def order_halted_while_compensating(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: create_order fails; a halt (compensate) reaches the saga as it
    compensates: it goes on and ends compensated, not aborted."""
    await rig.shop.arm_fault("create_order", "out of paper")
    await rig.shop.arm_fault("release_inventory", "", delay_s=3.0)
    handle = await rig.order("order_halted_while_compensating")
    await wait_for(handle, lambda s: s.state is SagaState.COMPENSATING)
    await halted(rig, handle, "halt", "compensate")
    await result(handle, SagaState.COMPENSATED)
    return await one(handle, "order_halted_while_compensating")


@recording("order_quarantined")
async def order_quarantined(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: quarantined at the gate, aborted: compensation held until released."""
    handle = await rig.order("order_quarantined")
    await gate(handle)
    halt_id = await halted(rig, handle, "quarantine", "keep")
    await handle.signal("abort", Abort(reason="investigating", by="carol"))
    await wait_for(handle, lambda s: s.state is SagaState.HALTED)
    await resumed(rig, handle, halt_id)
    await result(handle, SagaState.ABORTED)
    return await one(handle, "order_quarantined")


@recording("order_malformed_signals")
async def order_malformed_signals(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: malformed signals and a malformed update refused; then approved."""
    handle = await rig.order("order_malformed_signals")
    seq = await gate(handle)
    bad: list[tuple[str, Any]] = [
        ("approve", {"journal_seq": seq, "approved_by": "x"}),
        ("approve", {"journal_seq": seq, "approver": "mallory\x00"}),
        ("reject", {"journal_seq": str(seq), "approver": "eve"}),
        ("approve", {"journal_seq": seq + 7, "approver": "eve"}),  # well-formed, wrong seq
        ("abort", {"reason": 5}),
        ("resolve", ["not", "an", "object"]),
        # bytes the data converter cannot decode (not UTF-8): read by the saga, refused
        ("approve", RawValue(Payload(metadata={"encoding": b"json/plain"}, data=b'"\xff"'))),
    ]
    for name, payload in bad:
        await handle.signal(name, payload)
    try:
        await handle.execute_update(
            "decide", {"journal_seq": seq, "approver": "eve", "approve": True, "x": 1}
        )
    except WorkflowUpdateFailedError:
        pass
    else:
        raise RecordingError("the malformed update was taken")
    # the refused update is recorded too
    status: SagaStatus = await wait_for(handle, lambda s: len(s.refused_decisions) == len(bad) + 1)
    expect(status.state is SagaState.AWAITING_APPROVAL, str(status.state))
    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_malformed_signals")


@recording("order_approved_signed")
async def order_approved_signed(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder on a worker with a keyring: unsigned and unallowed approvals refused,
    then approved by signal ``approve`` signed with alice's key; completed."""
    # signatures name the saga, and a replayed history's workflow id is its file's name
    handle = await rig.order(
        "order_approved_signed", task_queue=rig.signed_queue, saga_id="order_approved_signed"
    )
    status: SagaStatus = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq, input_hash = status.pending_approval.journal_seq, status.pending_approval.input_hash

    def signed_by_alice(who: str) -> Approve:
        statement = Statement(handle.id, seq, input_hash, "approve", who)
        signature = rig.signer.sign(statement)
        return Approve(journal_seq=seq, approver=who, input_hash=input_hash, signature=signature)

    await handle.signal("approve", Approve(journal_seq=seq, approver="alice"))
    await handle.signal("approve", signed_by_alice("bob"))  # her key may not sign for bob
    await wait_for(handle, lambda s: len(s.refused_decisions) == 2)
    await handle.signal("approve", signed_by_alice("alice"))
    await result(handle, SagaState.COMPLETED)
    return await one(handle, "order_approved_signed")


@recording("order_approved_with_its_gate")
async def order_approved_with_its_gate(rig: Rig) -> dict[str, WorkflowHistory]:
    """order.PlaceOrder: approved the moment a query shows the gate, in the gate's own task.

    The worker dies while open_approval waits on a lock; the new worker runs it again, and
    answers the ``status`` query by applying its result before a workflow task has taken it,
    so the approval shares that task. The live worker takes it; a replaying worker applies the
    signal first, refuses it ("not waiting for an approval") and starts the deadline timer
    where the history has APPROVED: the saga fails every task once it leaves the cache.
    """
    queue = f"record-gate-{uuid.uuid4().hex[:8]}"
    log_file = rig.scratch / "order_approved_with_its_gate.log"
    worker = WorkerProcess(rig.endpoints, rig.database_url, queue, log_file)
    await worker.start()
    lock = await psycopg.AsyncConnection.connect(rig.database_url)
    try:
        # open_approval stores its request in this table: hold it until the worker is dead
        await lock.execute("LOCK TABLE sagacity_approval_request IN ACCESS EXCLUSIVE MODE")
        handle = await rig.client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(options=SagaOptions(heartbeat_timeout_s=2)),
            id=rig.new_id("order_approved_with_its_gate"),
            task_queue=queue,
            result_type=SagaResult,
        )
        for _ in range(300):
            if ("create_order", "EXECUTED") in await phases(rig.journal, handle.id):
                break
            await asyncio.sleep(0.1)
        else:
            raise RecordingError("create_order never ran")
        await asyncio.sleep(1)  # open_approval has started and waits on the lock
        worker.kill()
        await worker.start()
        await lock.rollback()
        await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
        await result(handle, SagaState.COMPLETED)
        history = await handle.fetch_history()
        shared = shares_a_task(history, EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, "approve")
        expect(shared, "the approval did not share a task with open_approval's result")
        return {"order_approved_with_its_gate": history}
    finally:
        await lock.close()
        worker.stop()


# -- the agent workflow, sagacity.AgentSaga ------------------------------------------------------


async def agent_result(handle: WorkflowHandle[Any, Any], state: SagaState) -> AgentSagaResult:
    done: AgentSagaResult = await asyncio.wait_for(handle.result(), 60)
    expect(done.saga.status is state, f"{handle.id} ended {done.saga.status}, not {state}")
    return done


@recording("agent_single_turn")
async def agent_single_turn(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.AgentSaga: one prompt, one tool call, the answer; completed."""
    handle = await rig.agent(
        "agent_single_turn", AgentSagaRequest(prompt="set a", model="one", tools=["set_flag"])
    )
    done = await agent_result(handle, SagaState.COMPLETED)
    expect(done.final_output == "flag a is set", str(done.final_output))
    return await one(handle, "agent_single_turn")


@recording("agent_multi_turn")
async def agent_multi_turn(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.AgentSaga: multi-turn, a second message by update ``turn``, signal ``finish``."""
    handle = await rig.agent(
        "agent_multi_turn",
        AgentSagaRequest(
            prompt="set a", model="chat", tools=["set_flag", "send_note"], multi_turn=True
        ),
    )
    reply = await handle.execute_update("turn", "note hi", result_type=str)
    expect(reply == "note sent", reply)
    await handle.signal("finish")
    done = await agent_result(handle, SagaState.COMPLETED)
    expect(done.turns == ["flag a is set", "note sent"], str(done.turns))
    return await one(handle, "agent_multi_turn")


@recording("agent_conversation_continued")
async def agent_conversation_continued(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.AgentSaga: a conversation continues as new, handing it over by reference."""
    handle = await rig.agent(
        "agent_conversation_continued",
        AgentSagaRequest(
            prompt="set a",
            model="chat3",
            tools=["set_flag", "send_note"],
            multi_turn=True,
            options=SagaOptions(continue_as_new_events=50),
        ),
    )
    for message, answer in (("note hi", "note sent"), ("set b", "flag b is set")):
        reply = await handle.execute_update("turn", message, result_type=str)
        expect(reply == answer, reply)
    await handle.signal("finish")
    done = await agent_result(handle, SagaState.COMPLETED)
    expect(done.turns == ["flag a is set", "note sent", "flag b is set"], str(done.turns))
    runs = await chain(rig, handle, "agent_conversation_continued")
    expect(len(runs) >= 2, f"{len(runs)} run(s): the conversation did not continue as new")
    return runs


@recording("agent_compensated")
async def agent_compensated(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.AgentSaga: a tool fails; compensated, and the agent is told (one more model call)."""
    handle = await rig.agent(
        "agent_compensated",
        AgentSagaRequest(prompt="set a", model="fails", tools=["set_flag", "explode"]),
    )
    done = await agent_result(handle, SagaState.COMPENSATED)
    expect(done.final_output == "the flag was taken down again", str(done.final_output))
    return await one(handle, "agent_compensated")


# -- the MCP gateway's session workflow, sagacity.McpSession --------------------------------------


async def mcp_session(rig: Rig, name: str, **request: Any) -> WorkflowHandle[Any, McpEnd]:
    return await rig.client.start_workflow(
        MCP_SESSION_WORKFLOW,
        McpSessionRequest(server="samples", **request),
        id=rig.new_id(name),
        task_queue=rig.queue,
        result_type=McpEnd,
    )


@recording("mcp_session_rolled_back")
async def mcp_session_rolled_back(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.McpSession: two calls and a keepalive, then ``rollback``: undone, newest first."""
    handle = await mcp_session(rig, "mcp_session_rolled_back")
    await handle.execute_update("call", McpCall(tool="set_flag", arguments={"name": "m"}))
    await handle.signal("keepalive")
    await handle.execute_update("call", McpCall(tool="send_note", arguments={"text": "m"}))
    end = await handle.execute_update("rollback", result_type=McpEnd)
    expect(end.state is SagaState.COMPENSATED, end.message)
    expect([e.tool_name for e in end.saga.compensated] == ["send_note", "set_flag"], end.message)
    return await one(handle, "mcp_session_rolled_back")


@recording("mcp_session_approved_committed")
async def mcp_session_approved_committed(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.McpSession: an IRREVERSIBLE call approved by signal, then ``commit``."""
    handle = await mcp_session(rig, "mcp_session_approved_committed")
    wire = await handle.start_update(
        "call",
        McpCall(tool="wire", arguments={"amount": 5, "api_token": "tok-m"}),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    await handle.signal("approve", Approve(journal_seq=await gate(handle), approver="alice"))
    await wire.result()
    end = await handle.execute_update("commit", result_type=McpEnd)
    expect(end.state is SagaState.COMPLETED, end.message)
    return await one(handle, "mcp_session_approved_committed")


@recording("mcp_session_lost")
async def mcp_session_lost(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.McpSession: a call, then no word for the lease: compensated by ``on_end``."""
    handle = await mcp_session(rig, "mcp_session_lost", lease_s=2)
    await handle.execute_update("call", McpCall(tool="set_flag", arguments={"name": "l"}))
    end = await asyncio.wait_for(handle.result(), 60)
    expect(end.state is SagaState.COMPENSATED and "said nothing" in end.message, end.message)
    return await one(handle, "mcp_session_lost")


@recording("mcp_session_lost_at_gate")
async def mcp_session_lost_at_gate(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.McpSession: a call, then an IRREVERSIBLE one at its gate and no word for the
    lease: the saga aborts, the waiting call never runs, the first is undone."""
    handle = await mcp_session(rig, "mcp_session_lost_at_gate", lease_s=2)
    await handle.execute_update("call", McpCall(tool="set_flag", arguments={"name": "g"}))
    await handle.start_update(
        "call",
        McpCall(tool="wire", arguments={"amount": 7, "api_token": "tok-g"}),
        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
    )
    end = await asyncio.wait_for(handle.result(), 60)
    expect(end.state is SagaState.ABORTED, end.message)
    expect([e.tool_name for e in end.saga.compensated] == ["set_flag"], end.message)
    return await one(handle, "mcp_session_lost_at_gate")


@recording("mcp_session_continued")
async def mcp_session_continued(rig: Rig) -> dict[str, WorkflowHistory]:
    """sagacity.McpSession: a long session continues as new between calls; rolled back across
    its runs."""
    handle = await mcp_session(
        rig, "mcp_session_continued", options=SagaOptions(continue_as_new_events=50)
    )
    for n in range(6):
        await handle.execute_update("call", McpCall(tool="set_flag", arguments={"name": f"c{n}"}))
    end = await handle.execute_update("rollback", result_type=McpEnd)
    expect(end.state is SagaState.COMPENSATED and end.saga.compensated_count == 6, end.message)
    runs = await chain(rig, handle, "mcp_session_continued")
    expect(len(runs) >= 2, f"{len(runs)} run(s): the session did not continue as new")
    return runs


# -- running it ----------------------------------------------------------------------------------


def files_of(name: str, tag: str | None) -> list[Path]:
    suffix = f"@{tag}" if tag else ""
    where = PATHS[name].directory
    return sorted([*where.glob(f"{name}{suffix}.json"), *where.glob(f"{name}-run*{suffix}.json")])


@asynccontextmanager
async def rig(scratch: Path) -> AsyncIterator[Rig]:
    # the corpus is recorded in clear: it is committed and replayed by anyone, and a codec key
    # cannot be (the replayer reads clear payloads whatever its keys); worker processes inherit
    for name in ("SAGACITY_CODEC_KEYS", "SAGACITY_CODEC_KEYS_FILE"):
        os.environ.pop(name, None)
    settings = load_settings()
    if not settings.data_dir.is_absolute():
        repo = Path(__file__).resolve().parents[2]
        settings = settings.model_copy(update={"data_dir": repo / settings.data_dir})
    async with AsyncExitStack() as stack:
        endpoints = await stack.enter_async_context(DevStack(settings, temporal_db="memory"))
        name = f"sagacity_record_{uuid.uuid4().hex[:12]}"
        database_url = await ensure_database(endpoints.database_url, name)
        stack.push_async_callback(drop_database, endpoints.database_url, name)
        await migrate(database_url)
        pool = await open_pool(database_url, max_size=20)
        stack.push_async_callback(pool.close)
        shop = await Shop.open(database_url)
        stack.push_async_callback(shop.close)
        await shop.setup()
        use(shop)
        client = await Client.connect(
            endpoints.temporal_address,
            namespace=endpoints.temporal_namespace,
            api_key=settings.temporal_api_key,
            tls=settings.temporal_tls or None,
            data_converter=pydantic_data_converter,
        )
        journal, approvals = JournalStore(pool), ApprovalStore(pool)
        stack.push_async_callback(journal.close)
        # anchors on, as a new user's workers have them
        checkpoints = CheckpointWriter(scratch / "checkpoints", Ed25519PrivateKey.generate())
        # set up as `sagacity worker` sets up its worker: plugin, app workflows, interceptor
        queue, agent_queue, signed_queue = (
            f"record-{kind}-{uuid.uuid4().hex[:8]}" for kind in ("saga", "agent", "signed")
        )

        def saga_worker_on(task_queue: str, **decisions: Any) -> Worker:
            plugin = SagacityPlugin(
                journal=journal,
                approvals=approvals,
                tools=TOOLS,
                workflows=[*order_app.WORKFLOWS, McpSessionWorkflow],
                checkpoints=checkpoints,
                codec=None,
                **decisions,
            )
            return Worker(
                client,
                task_queue=task_queue,
                plugins=[plugin],
                interceptors=[ObservabilityInterceptor()],
                graceful_shutdown_timeout=timedelta(seconds=1),
            )

        saga_worker = saga_worker_on(queue)
        agent_worker = Worker(
            with_plugins(
                client,
                agent_plugins(
                    journal=journal,
                    approvals=approvals,
                    tools=TOOLS,
                    model_provider=ScriptedModelProvider(SCRIPTS),
                    workflows=order_app.WORKFLOWS,
                    checkpoints=checkpoints,
                    model_attempts=2,
                    codec=None,
                ),
            ),
            task_queue=agent_queue,
            interceptors=[ObservabilityInterceptor()],
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        # a worker with a keyring and a policy, as `sagacity dev` sets decisions up
        approvers, _ = ensure_dev_approvers(scratch, user="alice")
        signed_worker = saga_worker_on(
            signed_queue,
            keyring=load_keyring(approvers.keyring),
            policy=Policy(approvers={"*": ["alice"]}),
        )
        await stack.enter_async_context(saga_worker)
        await stack.enter_async_context(agent_worker)
        await stack.enter_async_context(signed_worker)
        yield Rig(
            client=client,
            endpoints=endpoints,
            database_url=database_url,
            journal=journal,
            shop=shop,
            queue=queue,
            agent_queue=agent_queue,
            scratch=scratch,
            signed_queue=signed_queue,
            signer=Signer.open(approvers.approver_key),
        )


async def record_one(r: Rig, name: str, tag: str | None) -> None:
    """Run one path, check that today's code replays what it recorded, then save it."""
    await r.shop.setup(reset=True)
    sample_tools.EFFECTS.clear()
    sample_tools.FLAKY_CALLS.clear()
    began = time.monotonic()
    path = PATHS[name]
    histories = await path.record(r)
    targets = {
        path.directory / (f"{stem}@{tag}.json" if tag else f"{stem}.json"): history
        for stem, history in histories.items()
    }
    for target, history in targets.items():
        try:
            await replay(history, target.name)
        except ReplayFailed:
            if path.nondeterministic:
                continue  # as expected, until the engine is fixed
            fd, kept = tempfile.mkstemp(prefix=f"{target.stem}-", suffix=".json")
            with open(fd, "w") as out:
                out.write(history.to_json())
            log.error("%s: the history that does not replay is in %s", name, kept)
            raise
        if path.nondeterministic:
            log.warning("%s replays now: record it as an ordinary path", target.name)
    for stale in files_of(name, tag):
        stale.unlink()
    for target, history in targets.items():
        target.parent.mkdir(exist_ok=True)
        target.write_text(history.to_json())
        log.info(
            "%s: %s, %d events, %d bytes (%.1fs)",
            name,
            target.name,
            len(history.events),
            target.stat().st_size,
            time.monotonic() - began,
        )


async def record(names: list[str], *, tag: str | None, force: bool) -> int:
    todo = []
    for name in names:
        kept = files_of(name, tag)
        if kept and not force:
            listed = ", ".join(p.name for p in kept)
            log.info("%s: kept %s (--force to record it again)", name, listed)
        else:
            todo.append(name)
    if not todo:
        return 0
    failed = 0
    with tempfile.TemporaryDirectory(prefix="record-histories-") as scratch:
        async with rig(Path(scratch)) as r:
            for name in todo:
                try:
                    await record_one(r, name, tag)
                except Exception:
                    failed += 1
                    log.exception("%s: not recorded", name)
    return 1 if failed else 0


def describe(file: Path) -> str:
    markers = patch_markers(file)
    patches = ", ".join(f"{p} (deprecated)" if d else p for p, d in markers.items())
    return f"{file.stat().st_size // 1024} KiB, patches: {patches or 'none'}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.temporal.record_histories")
    parser.add_argument("--only", action="append", choices=sorted(PATHS), metavar="NAME")
    parser.add_argument("--tag", help="record as <path>@TAG.json, beside the existing files")
    parser.add_argument("--force", action="store_true", help="replace existing files")
    parser.add_argument("--list", action="store_true", help="list the paths and their files")
    args = parser.parse_args(argv)
    # what each path recorded; the stack's and the SDK's chatter only when something is wrong
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    logging.getLogger("temporalio").setLevel(logging.ERROR)
    log.setLevel(logging.INFO)
    if args.list:
        listed: set[Path] = set()
        for name, spec in PATHS.items():
            print(f"{name}: {spec.about}")
            tagged = [*HISTORIES.glob(f"{name}@*.json"), *HISTORIES.glob(f"{name}-run*@*.json")]
            files = sorted({*files_of(name, None), *tagged})
            for file in files:
                print(f"    {file.name}  {describe(file)}")
            if not files:
                print("    (not recorded)")
            listed.update(files)
        others = [file for file in history_files() if file not in listed]
        if others:
            print("not from a path above (recorded by earlier code):")
            for file in others:
                print(f"    {file.name}  {describe(file)}")
        return 0
    return asyncio.run(record(args.only or list(PATHS), tag=args.tag, force=args.force))


if __name__ == "__main__":
    from sagacity.cli._exit import exit_now

    code = main(sys.argv[1:])
    exit_now(code)  # past the Temporal SDK's interpreter-teardown crash (sagacity/cli/_exit.py)
