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
    (item,) = listed.json()["requests"]
    assert (item["tool_name"], item["journal_seq"], item["waiting"]) == (
        "send_confirmation",
        waiting.seq,
        True,
    )
    assert item["deadline"] is not None
    shown = await api.get(path, headers=ALICE)
    assert shown.status_code == 200 and shown.json() == item
    # filters narrow the page and its counts; the per-tool counts ignore the tool filter
    only = {"saga_id": waiting.saga_id}
    cases: tuple[tuple[dict[str, Any], int], ...] = (
        ({**only, "tool": ["send_confirmation", "wire"]}, 1),
        ({**only, "tool": "wire"}, 0),
        ({**only, "older_than_s": 3600}, 0),
        ({**only, "newer_than_s": 3600}, 1),
    )
    for params, total in cases:
        page = (await api.get("/approvals", params=params, headers=BOB)).json()
        assert (page["total"], len(page["requests"]), page["next"]) == (total, total, None)
        if "tool" in params:
            assert page["by_tool"] == {"send_confirmation": 1}

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
        # the inbox's page and filters
        ("GET", "/approvals", {"headers": ALICE, "params": {"limit": 0}}, 422, "invalid_request"),
        ("GET", "/approvals", {"headers": ALICE, "params": {"limit": 501}}, 422, "invalid_request"),
        ("GET", "/approvals", {"headers": ALICE, "params": {"after": "bm90IGEgY3Vyc29y"}}, 422, "invalid_request"),
        ("GET", "/approvals", {"headers": ALICE, "params": {"after": "%%%"}}, 422, "invalid_request"),
        ("GET", "/approvals", {"headers": ALICE, "params": {"older_than_s": 1e300}}, 422, "invalid_request"),
        ("GET", "/approvals", {"headers": ALICE, "params": {"older_than_s": -1}}, 422, "invalid_request"),
        ("GET", "/approvals", {"headers": ALICE, "params": {"tool": "a\x00b"}}, 422, "invalid_request"),
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


async def test_bad_input_anywhere_is_a_4xx_in_the_error_shape_after_authentication(
    start_order: StartOrder, api: httpx.AsyncClient, journal: JournalStore, approvals: ApprovalStore
) -> None:
    """NUL, invalid UTF-8, lone surrogates, deep nesting, huge bodies: never a 500, nothing changes."""
    waiting = await start_order()
    sid, seq = waiting.saga_id, waiting.seq
    path = f"/approvals/{sid}/{seq}"
    before = await journal.read(sid)
    as_json = {"Content-Type": "application/json"}
    deep = b"[" * 10_000 + b"]" * 10_000
    huge = json.dumps({"reason": "x" * 3_000_000}).encode()

    async def streamed() -> Any:  # no Content-Length: the size is only known while reading
        for _ in range(50):
            yield b"x" * 100_000

    cases: list[tuple[str, str, dict[str, Any], int, str]] = [
        # (method, path, request options, status, error code)
        ("GET", f"/approvals/{sid}%00/{seq}", {"headers": ALICE}, 422, "invalid_request"),
        ("GET", "/approvals?saga_id=a%00b", {"headers": ALICE}, 422, "invalid_request"),
        ("POST", f"/approvals/{sid}%00/{seq}/approve", {"headers": ALICE}, 422, "invalid_request"),
        ("GET", f"/sagas/{sid}%00", {"headers": ALICE}, 422, "invalid_request"),
        ("POST", f"/approvals/{sid}/{2**64}/approve", {"headers": ALICE}, 422, "invalid_request"),
        ("GET", f"/approvals/{'x' * 2000}/{seq}", {"headers": ALICE}, 422, "invalid_request"),
        # bodies: the token first, then the body
        ("POST", f"{path}/reject", {"headers": as_json, "content": b'{"reason": "\xff"}'}, 401, "unauthorized"),
        ("POST", f"{path}/reject", {"headers": {**ALICE, **as_json}, "content": '{"reason": "é"}'.encode("latin-1")}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": as_json, "content": deep}, 401, "unauthorized"),
        ("POST", f"{path}/reject", {"headers": {**ALICE, **as_json}, "content": deep}, 422, "invalid_request"),
        ("POST", f"{path}/approve", {"headers": {**ALICE, **as_json}, "content": b'{"input_hash": ' + deep + b"}"}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": {**ALICE, **as_json}, "content": b'{"reason": "\ud800"}'}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": {**ALICE, **as_json}, "content": b'{"reason": "a\u0000b"}'}, 422, "invalid_request"),
        ("POST", f"{path}/approve", {"headers": {**ALICE, **as_json}, "content": b'{"input_hash": "\ud800"}'}, 422, "invalid_request"),
        ("POST", f"{path}/approve", {"headers": {**ALICE, **as_json}, "content": b'{"\ud800": 1}'}, 422, "invalid_request"),
        ("POST", f"{path}/approve", {"headers": {**ALICE, **as_json}, "content": b'{"input_hash": "not a hash"}'}, 422, "invalid_request"),
        ("POST", f"{path}/reject", {"headers": as_json, "content": huge}, 401, "unauthorized"),
        ("POST", f"{path}/reject", {"headers": {**ALICE, **as_json}, "content": huge}, 413, "payload_too_large"),
        ("POST", f"{path}/reject", {"headers": {**ALICE, **as_json}, "content": streamed()}, 413, "payload_too_large"),
        ("GET", "/no/such/route", {}, 401, "unauthorized"),
        ("GET", "/no/such/route", {"headers": ALICE}, 404, "not_found"),
        ("DELETE", path, {"headers": ALICE}, 405, "method_not_allowed"),
    ]  # fmt: skip
    for method, url, options, status, error in cases:
        response = await api.request(method, url, **options)
        assert response.status_code == status, (method, url[:80], response.text[:300])
        body = error_of(response)
        assert body["error"] == error, (method, url[:80], body)
        assert "Traceback" not in response.text

    assert await journal.read(sid) == before
    state = await waiting.handle.query("status", result_type=SagaStatus)
    assert state.state is SagaState.AWAITING_APPROVAL and state.refused_decisions == []
    assert await approvals.get(sid, seq) is not None
    ended = await api.post(f"{path}/reject", headers=ALICE, json={"reason": "test done"})
    assert ended.status_code == 200  # a saga left waiting without a worker slows later listings


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
        ("/sagas/{saga_id}", "get"),
        ("/sagas/{saga_id}/suspects/{seq}/resolve", "post"),
        ("/codec/encode", "post"),
        ("/codec/decode", "post"),
    }
