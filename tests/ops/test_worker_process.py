"""The ``sagacity worker`` process as an operator runs it: SIGTERM, metrics, probes, logs, traces."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from prometheus_client.parser import text_string_to_metric_families
from temporalio.client import Client, WorkflowHandle

from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaResult, SagaState
from tests.ops.conftest import Cli, StartWorker, signed_approval
from tests.temporal.conftest import awaiting_approval, phases, wait_for
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

GRACE_S = 10
ORDER_ROWS = [
    ("reserve_inventory", "INTENT"),
    ("reserve_inventory", "EXECUTED"),
    ("create_order", "INTENT"),
    ("create_order", "EXECUTED"),
    ("send_confirmation", "AWAITING_APPROVAL"),
    ("approval-gate", "APPROVED"),
    ("send_confirmation", "INTENT"),
    ("send_confirmation", "EXECUTED"),
]


async def start_order(client: Client, task_queue: str) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=f"ops-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )


async def test_sigterm_mid_call_lets_it_finish_and_a_new_worker_completes_the_saga(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    shop: Shop,
    journal: JournalStore,
    settings: Settings,
) -> None:
    first = await start_worker(
        SAGACITY_GRACEFUL_SHUTDOWN=str(GRACE_S),
        SAGACITY_METRICS_ADDRESS="127.0.0.1:0",
        SAGACITY_LOG_FORMAT="json",
    )
    await shop.arm_fault("create_order", "", delay_s=3)  # slow, not failing
    handle = await start_order(temporal_client, task_queue)
    sid = handle.id
    await wait_for(handle, lambda s: s.running == "create_order")
    assert first.get("/readyz")[0] == 200

    sent = time.monotonic()
    first.terminate()
    # draining: still alive, no longer ready
    for _ in range(50):
        if first.get("/readyz")[0] == 503:
            break
        await asyncio.sleep(0.05)
    assert first.get("/readyz")[0] == 503 and first.get("/healthz")[0] == 200
    code = await first.wait(timeout=GRACE_S + 10)
    took = time.monotonic() - sent
    assert code == 0, first.text()[-2000:]
    assert took < GRACE_S, f"worker took {took:.1f}s to stop, grace is {GRACE_S}s"
    # the call in flight at SIGTERM finished and was journaled before the worker left
    assert (await phases(journal, sid))[:4] == ORDER_ROWS[:4]

    await start_worker()
    waiting = await wait_for(handle, awaiting_approval, timeout=60)
    assert waiting.pending_approval is not None
    await handle.signal(
        "approve", signed_approval(settings, sid, waiting.pending_approval, "alice")
    )
    result = await handle.result()

    assert result.status is SagaState.COMPLETED
    assert await phases(journal, sid) == ORDER_ROWS  # nothing lost, nothing twice
    assert (await journal.verify(sid)).ok
    snap = await shop.snapshot()
    assert snap.available["p-1"] == 8 and snap.placed_orders == 1 and snap.outbox == 1

    # the first worker's log lines are JSON objects that name the saga and the call
    lines = [json.loads(line) for line in first.text().splitlines() if line.startswith("{")]
    call = [
        line for line in lines if line.get("saga_id") == sid and line.get("tool") == "create_order"
    ]
    assert call and call[0]["seq"] == 3 and call[0]["activity"] == "sagacity.call_tool"
    assert any("shutting down" in line["message"] for line in lines)


def samples(page: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
    }


def value(
    page: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return page.get((name, frozenset(labels.items())), 0.0)


async def test_metrics_count_sagas_tool_calls_and_compensations(
    start_worker: StartWorker,
    temporal_client: Client,
    task_queue: str,
    shop: Shop,
    settings: Settings,
) -> None:
    observed = await start_worker(SAGACITY_METRICS_ADDRESS="127.0.0.1:0")
    assert observed.get("/healthz") == (200, "ok\n")
    assert observed.get("/readyz") == (200, "ok\n")
    assert observed.get("/nothing-here")[0] == 404
    before = samples(observed.get("/metrics")[1])

    await shop.arm_fault("send_confirmation", "mail relay refused the message")
    handle = await start_order(temporal_client, task_queue)
    waiting = await wait_for(handle, awaiting_approval)
    during = samples(observed.get("/metrics")[1])
    assert (
        value(during, "sagacity_approvals_waiting")
        == value(before, "sagacity_approvals_waiting") + 1
    )
    assert waiting.pending_approval is not None
    await handle.signal(
        "approve", signed_approval(settings, handle.id, waiting.pending_approval, "bob")
    )
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED

    # the Temporal SDK's core counts a workflow completed once the server has answered its
    # worker's completion, which can come after the client has the result: read the page until
    # it shows the completion (the asserts below say what is missing if it never does)
    completion = {
        "namespace": "default",
        "service_name": "temporal-core-sdk",
        "task_queue": task_queue,
        "workflow_type": "order.PlaceOrder",
    }
    after = samples(observed.get("/metrics")[1])
    for _ in range(100):
        if value(after, "temporal_workflow_completed_total", **completion) >= 1:
            break
        await asyncio.sleep(0.1)
        after = samples(observed.get("/metrics")[1])
    workflow = {"workflow": "order.PlaceOrder"}
    assert value(after, "sagacity_sagas_started_total", **workflow) == 1
    assert value(after, "sagacity_sagas_ended_total", outcome="compensated", **workflow) == 1
    for tool in ("reserve_inventory", "create_order"):
        assert value(after, "sagacity_tool_calls_total", tool=tool, phase="EXECUTED") == 1
        assert value(after, "sagacity_compensations_total", tool=tool, outcome="compensated") == 1
    assert value(after, "sagacity_tool_calls_total", tool="send_confirmation", phase="FAILED") == 1
    assert value(after, "sagacity_approvals_waiting") == value(before, "sagacity_approvals_waiting")
    # 2 calls x (INTENT + outcome) + the gate + its decision + the third call + 2 compensations
    assert value(after, "sagacity_journal_append_seconds_count") >= 9
    # the Temporal SDK's own runtime metrics are on the same page
    assert value(after, "temporal_workflow_completed_total", **completion) == 1


class OtlpReceiver:
    """A stand-in OpenTelemetry collector on loopback: keeps every span posted to /v1/traces."""

    def __init__(self) -> None:
        self.requests: list[ExportTraceServiceRequest] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests.append(ExportTraceServiceRequest.FromString(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def spans(self) -> dict[str, set[bytes]]:
        """Span name to the trace ids it appeared in."""
        found: dict[str, set[bytes]] = {}
        for request in list(self.requests):
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        found.setdefault(span.name, set()).add(span.trace_id)
        return found


@pytest.fixture
def otlp() -> Iterator[OtlpReceiver]:
    receiver = OtlpReceiver()
    yield receiver
    receiver.server.shutdown()
    receiver.server.server_close()


async def test_otel_traces_a_saga_from_the_cli_start_to_its_tool_calls(
    start_worker: StartWorker, cli: Cli, task_queue: str, shop: Shop, otlp: OtlpReceiver
) -> None:
    env = {
        "SAGACITY_OTEL": "1",
        "OTEL_EXPORTER_OTLP_ENDPOINT": otlp.url,
        "OTEL_BSP_SCHEDULE_DELAY": "100",
    }
    await start_worker(**env)
    await shop.arm_fault("create_order", "order service down")  # ends without a human
    started = await cli(
        "saga",
        "start",
        "--order",
        "p-2:1",
        "--wait",
        extra_env={**env, "SAGACITY_TASK_QUEUE": task_queue},
    )
    assert started.code == 1 and "compensated" in started.stderr, started.stderr

    wanted = {
        "StartWorkflow:order.PlaceOrder",
        "RunActivity:sagacity.call_tool",
        "RunActivity:sagacity.compensate",
    }
    for _ in range(100):
        if wanted <= otlp.spans().keys():
            break
        await asyncio.sleep(0.1)
    spans = otlp.spans()
    assert wanted <= spans.keys(), sorted(spans)
    # the worker's spans continue the trace the CLI started
    (trace_id,) = spans["StartWorkflow:order.PlaceOrder"]
    assert spans["RunActivity:sagacity.call_tool"] == {trace_id}
