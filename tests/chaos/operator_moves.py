"""What operators and broken clients do to sagas beyond decisions, for the operations driver.

* :func:`terminate_and_roll_back`: ``temporal workflow terminate`` (no workflow code runs), then
  ``sagacity saga rollback ID --wait`` in a subprocess, as an operator would;
* :func:`reset_after_first_effect`: a client-side reset to the first workflow task completed after
  a tool call took effect;
* :func:`hold_compensations`: a ``keep`` halt on one saga while its compensations run, and how
  many undos went on under it;
* :func:`send_raw_signal` and :func:`send_raw_update`: decisions whose bytes no data converter
  would write (10,000-deep JSON, lone surrogates, invalid UTF-8), sent as raw payloads.
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
from temporalio.api.common.v1 import Payload, Payloads, WorkflowExecution
from temporalio.api.enums.v1 import EventType, UpdateWorkflowExecutionLifecycleStage
from temporalio.api.update.v1 import Input, Meta, Request, WaitPolicy
from temporalio.api.workflowservice.v1 import (
    ResetWorkflowExecutionRequest,
    SignalWorkflowExecutionRequest,
    UpdateWorkflowExecutionRequest,
)
from temporalio.client import Client, WorkflowHandle

from sagacity.approvals.halts import HaltService
from sagacity.errors import StoreUnavailable
from sagacity.journal import Phase
from sagacity.store import JournalStore, open_pool
from sagacity.store.db import Pool
from sagacity.store.halts import HaltScope, HaltStore
from sagacity.temporal.names import CALL_TOOL, OPEN_AND_CALL

#: how long a ``keep`` halt holds a compensating saga before it is lifted
HOLD_S = 8.0
#: how long lifting it may take (Postgres may be away)
RESUME_S = 120.0
#: the operator the driver's halts and rollbacks are made as
OPERATOR = "chaos-operator"
#: what a missing ``saga rollback`` command answers (typer's usage error)
NO_SUCH_COMMAND = "No such command"


def raw_decisions(seq: int) -> list[tuple[str, bytes]]:
    """Bodies no client library would send: (kind, the JSON bytes of the payload)."""
    deep = b'{"journal_seq": %d, "approver": ' % seq + b"[" * 10_000 + b"]" * 10_000 + b"}"
    return [
        ("10k-deep JSON", deep),
        ("10k-deep JSON", b"[" * 10_000 + b"]" * 10_000),
        ("lone surrogate", b'{"journal_seq": %d, "approver": "m\\ud800"}' % seq),
        ("lone surrogate", b'{"reason": "\\udfff", "by": "chaos-mallory"}'),
        ("invalid UTF-8", b'{"journal_seq": %d, "approver": "m\xff\xfe"}' % seq),
        ("invalid UTF-8", b'{"journal_seq": %d, "approver": "\xed\xa0\x80"}' % seq),
    ]


def raw_decision(rng: random.Random, seq: int) -> tuple[str, bytes]:
    return rng.choice(raw_decisions(seq))


async def _payloads(client: Client, data: bytes) -> Payloads:
    """``data`` as a JSON payload, through the client's codec (the worker decrypts it)."""
    payload = Payload(metadata={"encoding": b"json/plain"}, data=data)
    codec = client.data_converter.payload_codec
    encoded = [payload] if codec is None else await codec.encode([payload])
    return Payloads(payloads=encoded)


async def send_raw_signal(client: Client, saga_id: str, name: str, data: bytes) -> None:
    """Signal ``name`` with ``data`` as its one argument, as the bytes are."""
    await client.workflow_service.signal_workflow_execution(
        SignalWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=saga_id),
            signal_name=name,
            input=await _payloads(client, data),
            identity=client.identity,
            request_id=str(uuid.uuid4()),
        ),
        timeout=timedelta(seconds=5),
    )


async def send_raw_update(client: Client, saga_id: str, data: bytes) -> str:
    """A ``decide`` update with ``data`` as its argument; what came back: ``accepted``,
    ``refused`` (a non-retryable ApprovalRefused), or ``error: <type>`` for any other failure."""
    response = await client.workflow_service.update_workflow_execution(
        UpdateWorkflowExecutionRequest(
            namespace=client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=saga_id),
            wait_policy=WaitPolicy(
                lifecycle_stage=UpdateWorkflowExecutionLifecycleStage.UPDATE_WORKFLOW_EXECUTION_LIFECYCLE_STAGE_COMPLETED
            ),
            request=Request(
                meta=Meta(update_id=str(uuid.uuid4()), identity=client.identity),
                input=Input(name="decide", args=await _payloads(client, data)),
            ),
        ),
        timeout=timedelta(seconds=10),
    )
    if not response.HasField("outcome"):
        raise TimeoutError("the update was not answered")
    if response.outcome.HasField("success"):
        return "accepted"
    failure = response.outcome.failure
    info = failure.application_failure_info
    if failure.HasField("application_failure_info") and info.type == "ApprovalRefused":
        return "refused" if info.non_retryable else "error: retryable ApprovalRefused"
    return f"error: {info.type or failure.message[:80]}"


@dataclass
class Rollback:
    """What ``sagacity saga rollback --wait`` did: its exit code and output."""

    code: int
    output: str

    @property
    def missing(self) -> bool:
        return self.code == 2 and NO_SUCH_COMMAND in self.output


async def terminate_and_roll_back(
    client: Client, saga_id: str, env: dict[str, str], *, timeout: float
) -> Rollback:
    """Terminate the saga (its workflow code never learns it), then roll it back by the CLI.

    A Postgres outage meanwhile is the command's to wait out (``--wait``, within
    ``SAGACITY_OUTAGE_WINDOW``): it goes on once the journal is back, so the check that it
    exits 0 with nothing live stands; exit 3 would say the journal stayed unreachable."""
    await client.get_workflow_handle(saga_id).terminate(
        reason="chaos: terminated by an operator", rpc_timeout=timedelta(seconds=5)
    )
    proc = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).parent / "sagacity"),
        "saga",
        "rollback",
        saga_id,
        "--wait",
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    printed = bytearray()

    async def read_all(stream: asyncio.StreamReader) -> None:
        # kept as it comes: what the command printed before a timeout says where it stood
        while chunk := await stream.read(4096):
            printed.extend(chunk)

    try:
        await asyncio.wait_for(read_all(proc.stdout), timeout)
        code = await proc.wait()
    except TimeoutError:
        proc.kill()
        await proc.wait()
        said = printed.decode(errors="replace")
        return Rollback(-1, f"did not return within {timeout:.0f}s: {said}")
    return Rollback(code, printed.decode(errors="replace"))


def cli_env(client: Client, database_url: str, task_queue: str) -> dict[str, str]:
    """The environment a `sagacity` command needs to reach the chaos stack and its worker."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SAGACITY_", "TEMPORAL_"))}
    env |= {k: v for k, v in os.environ.items() if k.startswith("SAGACITY_CODEC_KEYS")}
    return env | {
        "SAGACITY_DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": client.service_client.config.target_host,
        "TEMPORAL_NAMESPACE": client.namespace,
        "SAGACITY_TASK_QUEUE": task_queue,
    }


#: the activities of a tool call: a new saga's first opens its journal too
CALLS = (CALL_TOOL, OPEN_AND_CALL)


async def reset_after_first_effect(client: Client, handle: WorkflowHandle[Any, Any]) -> str:
    """Reset the saga to the workflow task completed after its first tool call took effect;
    the new run's id."""
    calls: set[int] = set()
    effect = None
    async for event in handle.fetch_history_events():
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
            if event.activity_task_scheduled_event_attributes.activity_type.name in CALLS:
                calls.add(event.event_id)
        elif event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            attributes = event.activity_task_completed_event_attributes
            if effect is None and attributes.scheduled_event_id in calls:
                effect = event.event_id
        elif event.event_type == EventType.EVENT_TYPE_WORKFLOW_TASK_COMPLETED and effect:
            response = await client.workflow_service.reset_workflow_execution(
                ResetWorkflowExecutionRequest(
                    namespace=client.namespace,
                    workflow_execution=WorkflowExecution(workflow_id=handle.id),
                    reason="chaos: reset after the first effect",
                    workflow_task_finish_event_id=event.event_id,
                    request_id=str(uuid.uuid4()),
                ),
                timeout=timedelta(seconds=10),
            )
            return response.run_id
    raise LookupError("no workflow task completed after a tool call took effect")


@dataclass
class Hold:
    """A ``keep`` halt on a compensating saga: the undos journaled when it took hold and when it
    was lifted (one running when the halt came may finish; no other may start)."""

    undone_at_halt: int
    undone_at_lift: int


async def _undone(pool: Pool, saga_id: str) -> int:
    async with pool.connection() as conn:
        row = await (
            await conn.execute(
                "SELECT count(*) FROM side_effect_journal WHERE saga_id = %s AND phase = ANY(%s)",
                (saga_id, [Phase.COMPENSATED.value, Phase.COMPENSATION_FAILED.value]),
            )
        ).fetchone()
    return int(row[0]) if row else 0


async def _resume(service: HaltService, halt_id: int) -> None:
    """Lift the halt, through an outage if need be: a halt left in force would hold the saga."""
    deadline = time.monotonic() + RESUME_S
    while True:
        try:
            await service.resume(halt_id, by=OPERATOR, reason="chaos: carry on")
            return
        except (StoreUnavailable, psycopg.Error):
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(2.0)


async def hold_compensations(client: Client, database_url: str, saga_id: str) -> Hold | None:
    """Halt ``saga_id`` with policy ``keep`` for :data:`HOLD_S` seconds, then lift the halt;
    None when Postgres was away, and nothing is held (try again)."""
    try:
        pool = await open_pool(database_url, max_size=2)
    except StoreUnavailable:
        return None
    try:
        service = HaltService(client, HaltStore(pool), JournalStore(pool))
        try:
            result = await service.halt(
                scope=HaltScope(sagas=(saga_id,)),
                policy="keep",
                reason="chaos: hold the world as it is",
                operator=OPERATOR,
                settle=timedelta(seconds=0),
            )
        except (StoreUnavailable, psycopg.Error):
            return None
        try:
            at_halt = await _undone(pool, saga_id)
            await asyncio.sleep(HOLD_S)
            return Hold(at_halt, await _undone(pool, saga_id))
        except (StoreUnavailable, psycopg.Error):
            return None
        finally:
            await _resume(service, result.halt_id)
    finally:
        await pool.close()
