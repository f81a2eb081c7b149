"""Escalation past an approval request's SLA (issue 32), against the real Temporal server and
Postgres, with the shipped worker (``python -m workers.saga_worker``, the Order app) configured
as ``sagacity dev`` does (a keyring: decisions signed) plus an escalation webhook.

The webhook is a real HTTP server in the test that records what it is sent, the way a chat
tool's incoming webhook takes it (``{"text": …}``). Whether the approved call ran is read from
the shop's outbox, its side effect.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from temporalio.api.common.v1 import WorkflowExecution
from temporalio.api.enums.v1 import EventType
from temporalio.api.workflowservice.v1 import ResetWorkflowExecutionRequest
from temporalio.client import Client, WorkflowHandle

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import COOKIE, PREFIX, WebConsole
from sagacity.approvals.http import create_app
from sagacity.devstack import Endpoints
from sagacity.evidence.decisions import DecisionCheck, Signer, load_keyring
from sagacity.journal import Entry, Phase
from sagacity.journal.verify import ChainVerifier
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaState, SagaStatus
from sagacity.temporal.names import ESCALATE_APPROVAL
from tests.approvals.conftest import Cli
from tests.serving import serve
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, wait_for
from tests.temporal.test_crash import WorkerProcess
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

CONSOLE = "https://approvals.example.com"
#: the webhook's path is its secret (Slack's, Mattermost's): records name only scheme and host
SECRET_PATH = "/hooks/T000/B000/s3cr3t"


@dataclasses.dataclass
class Receiver:
    """A chat tool's incoming webhook: records each POST; answers as ``mode`` says."""

    url: str = ""
    mode: str = "ok"  # ok | fail (HTTP 500) | hang (answers once released)
    posts: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    paths: list[str] = dataclasses.field(default_factory=list)
    received: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    release: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)

    async def hook(self, request: Request) -> Response:
        self.posts.append(await request.json())
        self.paths.append(request.url.path)
        self.received.set()
        if self.mode == "fail":
            return JSONResponse({"error": "down for maintenance"}, status_code=500)
        if self.mode == "hang":
            await asyncio.wait_for(self.release.wait(), timeout=60)
        return Response("ok")  # Slack answers a plain "ok"

    async def count(self, n: int, *, timeout: float = 60.0) -> None:
        async def reached() -> None:
            while len(self.posts) < n:
                await asyncio.sleep(0.05)

        await asyncio.wait_for(reached(), timeout)


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    hooks = Receiver()
    app = Starlette(routes=[Route("/{path:path}", hooks.hook, methods=["POST"])])
    async with serve(app) as url:
        hooks.url = url
        yield hooks
        hooks.release.set()  # a hanging answer ends, so the server can stop


StartWorker = Callable[[str], Awaitable[WorkerProcess]]


@pytest.fixture
async def start_worker(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    settings: Settings,
    shop: Shop,
    tmp_path: Path,
) -> AsyncIterator[StartWorker]:
    """Start the shipped worker, decisions signed, escalating to ``webhook``."""
    started: list[WorkerProcess] = []

    async def start(webhook: str) -> WorkerProcess:
        log = tmp_path / f"worker-{len(started)}.log"
        process = WorkerProcess(endpoints, database_url, task_queue, log)
        assert settings.keyring is not None
        process.env.update(
            SAGACITY_KEYRING=str(settings.keyring),
            SAGACITY_ESCALATION_WEBHOOK=webhook,
            SAGACITY_CONSOLE_URL=CONSOLE,
            SAGACITY_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
            SAGACITY_SIGNING_KEY=str(settings.signing_key),
            SAGACITY_LOG_INTERVAL="PT0S",  # the session's journal is shared
        )
        await process.start()
        started.append(process)
        return process

    yield start
    for process in started:
        process.stop()


@pytest.fixture
def service(
    temporal_client: Client, approvals: ApprovalStore, settings: Settings
) -> ApprovalService:
    """Decides as alice, signing with her key (the keyring the worker has trusts it)."""
    assert settings.approver_key is not None and settings.keyring is not None
    return ApprovalService(
        temporal_client,
        approvals,
        signer=Signer.open(settings.approver_key),
        keyring=load_keyring(settings.keyring),
    )


async def start_order(
    client: Client, task_queue: str, **options: Any
) -> tuple[WorkflowHandle[Any, SagaResult], int]:
    handle = await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=2, options=SagaOptions(heartbeat_timeout_s=2, **options)),
        id=f"escalate-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    return handle, status.pending_approval.journal_seq


@contextlib.asynccontextmanager
async def console(
    service: ApprovalService, journal: JournalStore
) -> AsyncIterator[httpx.AsyncClient]:
    """The console as ``sagacity approvals serve`` builds it, signed in as alice."""
    app = create_app(service, {"tok-alice": "alice"}, web=WebConsole(service, journal))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="https://approvals") as web:
        web.cookies.set(COOKIE, "tok-alice", path=PREFIX)
        yield web


def escalated_to(status: SagaStatus, *outcomes: str) -> bool:
    pending = status.pending_approval
    return (
        pending is not None
        and pending.escalation is not None
        and (pending.escalation.outcome in outcomes)
    )


@dataclasses.dataclass
class Scene:
    """A test's parts: the webhook, the shipped worker (started by the test), the stores, the
    approvals service deciding as alice, and the Order saga's shop."""

    receiver: Receiver
    start_worker: StartWorker
    client: Client
    task_queue: str
    service: ApprovalService
    journal: JournalStore
    approvals: ApprovalStore
    shop: Shop
    settings: Settings
    cli: Cli

    async def worker(self, webhook: str | None = None) -> WorkerProcess:
        """The worker, escalating to ``webhook`` (default: the receiver, at its secret path)."""
        return await self.start_worker(webhook or self.receiver.url + SECRET_PATH)

    async def order(self, **options: Any) -> tuple[WorkflowHandle[Any, SagaResult], int]:
        return await start_order(self.client, self.task_queue, **options)

    async def outbox(self) -> int:
        """Confirmations sent: the gated call's effect."""
        return (await self.shop.snapshot()).outbox

    async def decided(self, saga_id: str, seq: int) -> tuple[Entry, Any]:
        """The row that decided the request at ``seq`` (always the next one), and its payload."""
        rows = await self.journal.read(saga_id)
        row = next(r for r in rows if r.seq == seq + 1)
        return row, json.loads(row.payload)


@pytest.fixture
def scene(
    receiver: Receiver,
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    service: ApprovalService,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    settings: Settings,
    cli: Cli,
) -> Scene:
    return Scene(
        receiver, start_worker, temporal_client, task_queue, service, journal, approvals, shop,
        settings, cli,
    )  # fmt: skip


def decisions_hold(rows: list[Entry], settings: Settings) -> DecisionCheck:
    assert settings.keyring is not None
    check = DecisionCheck(rows[0].saga_id, load_keyring(settings.keyring))
    for row in rows:
        check.feed(row)
    check.finish()
    return check


async def test_past_the_sla_the_next_tier_is_told_once_and_the_saga_waits_for_its_human(
    scene: Scene,
) -> None:
    await scene.worker()
    handle, seq = await scene.order(approval_sla_s=1)
    status = await wait_for(handle, lambda s: escalated_to(s, "sent"))
    assert len(scene.receiver.posts) == 1 and scene.receiver.paths == [SECRET_PATH]
    # a body Slack's and Mattermost's incoming webhooks take: text, naming saga, tool, wait, link
    (body,) = scene.receiver.posts
    assert list(body) == ["text"]
    link = f"{CONSOLE}/console/approvals/{handle.id}/{seq}"
    assert link in body["text"]
    assert handle.id in body["text"] and "send_confirmation" in body["text"]
    assert "has waited 1 s" in body["text"]
    # the link is the request's console page, which shows the escalation (so does the inbox)
    async with console(scene.service, scene.journal) as web:
        page = await web.get(link.removeprefix(CONSOLE))
        assert page.status_code == 200
        assert "escalated at" in page.text and scene.receiver.url in page.text
        inbox = await web.get(f"{PREFIX}/")
        assert 'data-testid="escalated"' in inbox.text
        # the HTTP API says it as data
        api = await web.get(
            f"/approvals/{handle.id}/{seq}", headers={"Authorization": "Bearer tok-alice"}
        )
        assert api.status_code == 200
        told = api.json()["escalation"]
        assert (told["state"], told["to"], told["attempts"]) == ("sent", scene.receiver.url, 1)

    # the saga still waits, and says it escalated; so do the request row and the inbox
    assert status.state is SagaState.AWAITING_APPROVAL
    escalation = status.pending_approval.escalation  # type: ignore[union-attr]
    assert escalation is not None and escalation.to == scene.receiver.url
    stored = await scene.approvals.get(handle.id, seq)
    assert stored is not None and stored.escalated_at == escalation.at
    assert (stored.escalated_to, stored.escalation_state, stored.escalation_attempts) == (
        scene.receiver.url,
        "sent",
        1,
    )
    shown = await scene.service.get(handle.id, seq)
    assert shown.waiting and shown.escalation is not None
    assert (shown.escalation.state, shown.escalation.to) == ("sent", scene.receiver.url)

    # and `sagacity approvals list` / `show`
    listed = await scene.cli("approvals", "list", "--saga", handle.id)
    assert listed.code == 0, listed.stderr
    assert f"waiting, escalated {escalation.at:%Y-%m-%d %H:%M:%S}" in listed.stdout
    shown_cli = await scene.cli("approvals", "show", handle.id, str(seq))
    assert shown_cli.code == 0, shown_cli.stderr
    assert f"to {scene.receiver.url}, sent, 1 attempt" in shown_cli.stdout
    status_cli = await scene.cli("saga", "status", handle.id)
    assert status_cli.code == 0, status_cli.stderr
    assert f"escalated at {escalation.at.isoformat()} to {scene.receiver.url}: sent" in (
        status_cli.stdout
    )

    await asyncio.sleep(2)  # twice the SLA again: no second message
    assert len(scene.receiver.posts) == 1

    await scene.service.approve(handle.id, seq, approver="alice")
    result = await handle.result()
    assert result.status is SagaState.COMPLETED
    assert await scene.outbox() == 1
    row, payload = await scene.decided(handle.id, seq)
    assert row.phase is Phase.APPROVED and payload["by"] == "alice"
    assert payload["escalated"] == {
        "at": escalation.at.isoformat().replace("+00:00", "Z"),
        "to": scene.receiver.url,
        "outcome": "sent",
    }
    rows = await scene.journal.read(handle.id)
    assert (await scene.journal.verify(handle.id)).ok
    check = decisions_hold(rows, scene.settings)
    assert check.problems == [] and check.checked >= 1
    # the escalation record is outside the signed statement, inside the row's hash: removing or
    # editing it breaks the chain
    for forged in ({k: v for k, v in payload.items() if k != "escalated"},
                   {**payload, "escalated": {**payload["escalated"], "outcome": "recorded"}}):  # fmt: skip
        edited = [
            dataclasses.replace(r, payload=json.dumps(forged)) if r.seq == seq + 1 else r
            for r in rows
        ]
        verifier = ChainVerifier(handle.id)
        for r in edited:
            verifier.feed(r)
        assert not verifier.verdict().ok


async def test_a_decision_before_the_sla_escalates_nothing(scene: Scene) -> None:
    await scene.worker()
    handle, seq = await scene.order(approval_sla_s=2)
    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await handle.result()).status is SagaState.COMPLETED
    await asyncio.sleep(3)  # past the SLA the saga no longer waits on
    assert scene.receiver.posts == []
    _, payload = await scene.decided(handle.id, seq)
    assert "escalated" not in payload


async def test_a_webhook_that_fails_is_retried_shown_and_never_holds_the_decision(
    scene: Scene,
) -> None:
    scene.receiver.mode = "fail"
    worker = await scene.worker()
    handle, seq = await scene.order(approval_sla_s=1)
    await scene.receiver.count(2)  # tried again, with backoff
    shown = await scene.service.get(handle.id, seq)
    assert shown.waiting and shown.escalation is not None
    assert shown.escalation.state in ("failed", "posting") and shown.escalation.attempts >= 2
    stored = await scene.approvals.get(handle.id, seq)
    assert stored is not None and stored.escalation_error is not None
    assert stored.escalation_error == f"{scene.receiver.url} answered 500"
    # the webhook's secret path stays out of every record: the row, the log (httpx's own
    # request lines included), history (the saga's failure details)
    assert SECRET_PATH not in stored.escalation_error
    logged = worker.log.read_text()
    assert f"POST {scene.receiver.url} " in logged and SECRET_PATH not in logged

    # the human decides as ever, while the webhook keeps failing
    await scene.service.reject(handle.id, seq, approver="alice", reason="not today")
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    assert await scene.outbox() == 0
    row, payload = await scene.decided(handle.id, seq)
    assert row.phase is Phase.REJECTED and payload["reason"] == "not today"
    assert payload["escalated"]["outcome"] == "pending"  # still trying when decided
    assert payload["escalated"]["to"] == ""  # no attempt had told the saga where


async def test_a_webhook_that_refuses_connections_does_not_wedge_the_saga(scene: Scene) -> None:
    closed = "http://127.0.0.1:9"  # discard: nothing listens
    await scene.worker(closed + SECRET_PATH)
    handle, seq = await scene.order(approval_sla_s=1)
    for _ in range(300):
        stored = await scene.approvals.get(handle.id, seq)
        if stored is not None and stored.escalation_state == "failed":
            break
        await asyncio.sleep(0.1)
    assert stored is not None and stored.escalation_error == f"ConnectError from {closed}"
    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await handle.result()).status is SagaState.COMPLETED
    assert await scene.outbox() == 1


async def test_the_deadline_after_escalation_still_rejects_as_timeout(scene: Scene) -> None:
    await scene.worker()
    handle, seq = await scene.order(approval_sla_s=1, approval_deadline_s=4)
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    assert len(scene.receiver.posts) == 1
    row, payload = await scene.decided(handle.id, seq)
    assert row.phase is Phase.REJECTED
    assert (payload["by"], payload["reason"]) == ("sagacity", "timeout")
    assert payload["escalated"]["outcome"] == "sent"
    assert await scene.outbox() == 0


async def test_a_worker_killed_mid_post_does_not_post_again(scene: Scene) -> None:
    scene.receiver.mode = "hang"
    worker = await scene.worker()
    handle, seq = await scene.order(approval_sla_s=1)
    await asyncio.wait_for(scene.receiver.received.wait(), 60)
    worker.kill()  # the POST is out; its answer never reaches the worker
    scene.receiver.release.set()
    await forget_killed_worker(scene.client, handle.id)
    await worker.start()
    # the next attempt finds the POST in flight: taken as unknown, not sent twice
    status = await wait_for(handle, lambda s: escalated_to(s, "unknown"), timeout=60)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert len(scene.receiver.posts) == 1
    stored = await scene.approvals.get(handle.id, seq)
    assert stored is not None
    assert (stored.escalation_state, stored.escalation_attempts) == ("unknown", 1)
    assert stored.escalation_error and "stopped while posting" in stored.escalation_error

    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await handle.result()).status is SagaState.COMPLETED
    assert await scene.outbox() == 1
    _, payload = await scene.decided(handle.id, seq)
    assert payload["escalated"]["outcome"] == "unknown"
    assert len(scene.receiver.posts) == 1


async def test_a_reset_to_before_the_escalation_runs_it_again_without_a_second_post(
    scene: Scene,
) -> None:
    await scene.worker()
    handle, seq = await scene.order(approval_sla_s=1)
    await wait_for(handle, lambda s: escalated_to(s, "sent"))
    point = None
    async for event in handle.fetch_history_events():
        attributes = event.activity_task_scheduled_event_attributes
        if attributes.activity_type.name == ESCALATE_APPROVAL:
            point = attributes.workflow_task_completed_event_id
    assert point is not None
    # the task that started the escalation runs again in a new run: the escalation with it
    reset = await scene.client.workflow_service.reset_workflow_execution(
        ResetWorkflowExecutionRequest(
            namespace=scene.client.namespace,
            workflow_execution=WorkflowExecution(workflow_id=handle.id),
            reason="test: reset to before the escalation",
            workflow_task_finish_event_id=point,
            request_id=str(uuid.uuid4()),
        )
    )
    again = scene.client.get_workflow_handle(handle.id, run_id=reset.run_id, result_type=SagaResult)
    await wait_for(again, lambda s: escalated_to(s, "sent"))
    scheduled, completed = set(), set()
    async for event in again.fetch_history_events():
        if event.activity_task_scheduled_event_attributes.activity_type.name == ESCALATE_APPROVAL:
            scheduled.add(event.event_id)
        if event.event_type == EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
            completed.add(event.activity_task_completed_event_attributes.scheduled_event_id)
    escalated = [e for e in scheduled & completed if e > point]
    assert escalated  # the new run ran the activity: its claim found the request told
    assert len(scene.receiver.posts) == 1
    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await again.result()).status is SagaState.COMPLETED
    assert await scene.outbox() == 1
    _, payload = await scene.decided(handle.id, seq)
    assert payload["escalated"]["outcome"] == "sent"
    assert (await scene.journal.verify(handle.id)).ok
