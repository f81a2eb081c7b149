"""The approvals HTTP API over the real service, Temporal and Postgres (in-process ASGI)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.http import create_app, openapi_document
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState, SagaStatus
from tests.approvals.conftest import GATE_SEQ, StartOrder
from workflows.order.shop import Shop

OPENAPI = Path(__file__).parents[2] / "docs" / "approvals-openapi.json"
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}


@pytest.fixture
async def api(
    temporal_client: Client, approvals: ApprovalStore
) -> AsyncIterator[httpx.AsyncClient]:
    # alice may send confirmations; bob holds a valid token but is on no allow-list
    service = ApprovalService(
        temporal_client, approvals, approvers={"send_confirmation": ["alice"]}
    )
    transport = httpx.ASGITransport(app=create_app(service, TOKENS))
    async with httpx.AsyncClient(transport=transport, base_url="http://approvals") as client:
        yield client


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) >= {"error", "detail"}, body
    return body


async def test_approve_lists_then_runs_the_call_once_however_often_it_is_sent(
    start_order: StartOrder, api: httpx.AsyncClient, journal: JournalStore, shop: Shop
) -> None:
    waiting = await start_order()
    path = f"/approvals/{waiting.saga_id}/{waiting.seq}"

    listed = await api.get("/approvals", params={"saga_id": waiting.saga_id}, headers=BOB)
    assert listed.status_code == 200
    (item,) = listed.json()
    assert (item["tool_name"], item["journal_seq"], item["waiting"]) == (
        "send_confirmation",
        waiting.seq,
        True,
    )
    shown = await api.get(path, headers=ALICE)
    assert shown.status_code == 200 and shown.json() == item

    # two clicks at once: the saga takes one decision and refuses the other
    first, second = await asyncio.gather(
        api.post(f"{path}/approve", headers=ALICE, json={"input_hash": item["input_hash"]}),
        api.post(f"{path}/approve", headers=ALICE),
    )
    assert sorted([first.status_code, second.status_code]) == [200, 409]
    ok = first if first.status_code == 200 else second
    assert ok.json()["decision"] == "approved" and ok.json()["approver"] == "alice"

    assert (await waiting.handle.result()).status is SagaState.COMPLETED
    late = await api.post(f"{path}/approve", headers=ALICE)
    assert late.status_code == 409 and error_of(late)["kind"] == "not_waiting"
    rows = await journal.read(waiting.saga_id)
    assert [r.payload for r in rows if r.phase == "APPROVED"] == ["approver=alice"]
    assert (await shop.snapshot()).outbox == 1


async def test_refused_requests_change_neither_journal_nor_saga(
    start_order: StartOrder,
    api: httpx.AsyncClient,
    journal: JournalStore,
    approvals: ApprovalStore,
) -> None:
    waiting = await start_order()
    sid, seq = waiting.saga_id, waiting.seq
    path = f"/approvals/{sid}/{seq}"
    before = await journal.read(sid)

    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        # (method, path, request options, status, error code or conflict kind)
        ("GET", "/approvals", {}, 401, "unauthorized"),
        ("POST", f"{path}/approve", {}, 401, "unauthorized"),
        ("POST", f"{path}/approve", {"headers": {"Authorization": "Bearer nope"}}, 401, "unauthorized"),
        ("POST", f"{path}/approve", {"headers": {"Authorization": "Basic tok-alice"}}, 401, "unauthorized"),
        # authentication is checked before the body is read
        ("POST", f"{path}/reject", {"content": b"{not json"}, 401, "unauthorized"),
        ("POST", f"{path}/approve", {"headers": BOB}, 403, "approver_not_allowed"),
        ("POST", f"{path}/reject", {"headers": BOB, "json": {"reason": "no"}}, 403, "approver_not_allowed"),
        ("POST", f"/approvals/{sid}/{seq + 1}/approve", {"headers": ALICE}, 409, "unknown_seq"),
        ("POST", f"{path}/approve", {"headers": ALICE, "json": {"input_hash": "0" * 64}}, 409, "input_hash_mismatch"),
        ("POST", f"/approvals/no-such-saga/{seq}/approve", {"headers": ALICE}, 404, "approval_not_found"),
        ("GET", f"/approvals/{sid}/{seq + 1}", {"headers": ALICE}, 404, "approval_not_found"),
        # the approver is the token's principal; a body cannot name another one
        ("POST", f"{path}/approve", {"headers": ALICE, "json": {"approver": "bob"}}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": ALICE, "content": b"{not json"}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": ALICE, "json": {}}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": ALICE, "json": {"reason": ""}}, 422, "invalid_request"),
        ("POST", f"/approvals/{sid}/zero/approve", {"headers": ALICE}, 422, "invalid_request"),
        ("POST", f"/approvals/{sid}/0/approve", {"headers": ALICE}, 422, "invalid_request"),
    ]  # fmt: skip
    for method, url, options, status, error in cases:
        response = await api.request(method, url, **options)
        assert response.status_code == status, (method, url, response.text)
        body = error_of(response)
        assert error in (body["error"], body.get("kind")), (method, url, body)
        if status == 401:
            assert response.headers["WWW-Authenticate"] == "Bearer"
    named = await api.post(f"{path}/approve", headers=ALICE, json={"approver": "bob"})
    assert "body.approver" in error_of(named)["detail"]

    assert await journal.read(sid) == before
    status = await waiting.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL and status.head == waiting.status.head
    assert await approvals.get(sid, seq) is not None

    rejected = await api.post(f"{path}/reject", headers=ALICE, json={"reason": "not today"})
    assert rejected.status_code == 200 and rejected.json()["reason"] == "not today"
    assert (await waiting.handle.result()).status is SagaState.COMPENSATED
    assert len(await journal.read(sid)) == GATE_SEQ + 3  # REJECTED and two compensations


async def test_openapi_document_is_served_and_committed_current(api: httpx.AsyncClient) -> None:
    served = await api.get("/openapi.json")
    assert served.status_code == 200
    document = openapi_document()
    assert served.json() == document
    assert OPENAPI.read_text() == json.dumps(document, indent=2, ensure_ascii=False) + "\n", (
        "docs/approvals-openapi.json is stale: "
        "run `sagacity approvals openapi > docs/approvals-openapi.json`"
    )
    routes = {(p, m) for p, ops in document["paths"].items() for m in ops}
    assert routes == {
        ("/approvals", "get"),
        ("/approvals/{saga_id}/{seq}", "get"),
        ("/approvals/{saga_id}/{seq}/approve", "post"),
        ("/approvals/{saga_id}/{seq}/reject", "post"),
    }
