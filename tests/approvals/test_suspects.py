"""SUSPECT calls shown and resolved over HTTP and through the service, on real Temporal and Postgres.

The SUSPECT sagas come from a worker process killed mid-call (``make_suspects``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.client import Client

from sagacity.approvals import ApprovalService, resolve_suspect
from sagacity.approvals.http import create_app
from sagacity.errors import SuspectConflict
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState, SagaStatus
from tests.approvals.conftest import MakeSuspects
from tests.temporal.conftest import phases
from workflows.order.shop import Shop

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ALICE = {"Authorization": "Bearer tok-alice"}
BOB = {"Authorization": "Bearer tok-bob"}


@pytest.fixture
async def api(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> AsyncIterator[httpx.AsyncClient]:
    service = ApprovalService(temporal_client, approvals, journal=journal)
    transport = httpx.ASGITransport(app=create_app(service, TOKENS))
    async with httpx.AsyncClient(transport=transport, base_url="http://approvals") as client:
        yield client


def error_of(response: httpx.Response) -> dict[str, Any]:
    body: dict[str, Any] = response.json()
    assert set(body) >= {"error", "detail"}, body
    return body


async def test_a_suspect_call_is_shown_and_resolved_once_as_the_token_principal(
    make_suspects: MakeSuspects, api: httpx.AsyncClient, journal: JournalStore, shop: Shop
) -> None:
    (suspect,) = await make_suspects(1)
    sid, seq = suspect.saga_id, suspect.seq
    assert seq == 3  # reserve_inventory wrote rows 1-2; create_order's INTENT is row 3

    shown = await api.get(f"/sagas/{sid}", headers=BOB)
    assert shown.status_code == 200, shown.text
    view = shown.json()
    assert view["state"] == "suspect" and view["head_seq"] == 2
    assert view["suspect"]["call_seq"] == seq
    assert view["suspect"]["tool_name"] == "create_order"
    assert "not idempotent" in view["suspect"]["reason"]
    assert json.loads(view["suspect"]["input"])["product_id"] == "p-1"  # the INTENT row's input

    path = f"/sagas/{sid}/suspects/{seq}/resolve"
    before = await journal.read(sid)
    refused: list[tuple[str, dict[str, Any], int, str]] = [
        (path, {"json": {"happened": False}}, 401, "unauthorized"),
        (path, {"headers": ALICE, "json": {"happened": False, "resolver": "bob"}}, 422, "invalid_request"),
        (path, {"headers": ALICE, "json": {"happened": "no"}}, 422, "invalid_request"),
        (path, {"headers": ALICE, "json": {"happened": False, "result": {"x": 1}}}, 422, "invalid_request"),
        (path, {"headers": ALICE, "content": b'{"happened": true, "result": "\\ud800"}'}, 422, "invalid_request"),
        (f"/sagas/{sid}/suspects/{seq + 1}/resolve", {"headers": ALICE, "json": {"happened": False}}, 404, "suspect_not_found"),
        (f"/sagas/{sid}/suspects/1/resolve", {"headers": ALICE, "json": {"happened": False}}, 409, "already_resolved"),
        (f"/sagas/no-such-saga/suspects/{seq}/resolve", {"headers": ALICE, "json": {"happened": False}}, 404, "saga_not_found"),
    ]  # fmt: skip
    for url, options, status, error in refused:
        options.setdefault("headers", {}).setdefault("Content-Type", "application/json")
        response = await api.post(url, **options)
        assert response.status_code == status, (url, options, response.text)
        body = error_of(response)
        assert error in (body["error"], body.get("kind")), body
    assert await journal.read(sid) == before
    status = await suspect.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.SUSPECT and status.refused_decisions == []

    # two principals answer at once: the saga takes one resolution, the other is told so
    first, second = await asyncio.gather(
        api.post(path, headers=ALICE, json={"happened": False}),
        api.post(path, headers=BOB, json={"happened": False}),
    )
    assert sorted([first.status_code, second.status_code]) == [200, 409]
    taken, late = (first, second) if first.status_code == 200 else (second, first)
    assert error_of(late)["kind"] in {"already_resolved", "not_waiting"}
    resolution = taken.json()
    assert resolution["resolver"] in {"alice", "bob"}
    assert (resolution["call_seq"], resolution["tool_name"], resolution["outcome"]) == (
        seq,
        "create_order",
        "FAILED",
    )

    result = await suspect.handle.result()
    assert result.status is SagaState.COMPENSATED
    assert await phases(journal, sid) == [
        ("reserve_inventory", "INTENT"),
        ("reserve_inventory", "EXECUTED"),
        ("create_order", "INTENT"),
        ("create_order", "FAILED"),
        ("reserve_inventory", "COMPENSATED"),
    ]
    rows = await journal.read(sid)
    assert f"{resolution['resolver']}: the call did not happen" in rows[3].payload
    assert (await journal.verify(sid)).ok
    assert (await shop.snapshot()).available["p-1"] == 10

    ended = await api.get(f"/sagas/{sid}", headers=ALICE)
    assert ended.status_code == 200 and ended.json()["workflow_status"] == "completed"
    assert ended.json()["suspect"] is None


async def test_resolutions_racing_to_the_saga_one_is_taken_the_other_refused(
    make_suspects: MakeSuspects, temporal_client: Client, journal: JournalStore
) -> None:
    """Two resolutions sent together, past any lock: each sender learns what became of its own."""
    (suspect,) = await make_suspects(1)
    order = {"order_id": "ord-by-hand", "product_id": "p-1", "quantity": 2}

    outcomes = await asyncio.gather(
        resolve_suspect(
            temporal_client,
            suspect.saga_id,
            suspect.seq,
            resolver="carol",
            happened=True,
            result=order,
            journal=journal,
        ),
        resolve_suspect(
            temporal_client,
            suspect.saga_id,
            suspect.seq,
            resolver="dave",
            happened=True,
            result=order,
            journal=journal,
        ),
        return_exceptions=True,
    )

    taken = [o for o in outcomes if not isinstance(o, BaseException)]
    refused = [o for o in outcomes if isinstance(o, SuspectConflict)]
    assert len(taken) == 1 and len(refused) == 1, outcomes
    # refused by the saga, or (sent a moment later) seen taken before it was sent
    assert refused[0].kind in {"refused", "already_resolved"}
    winner = taken[0].resolver
    assert taken[0].outcome == "EXECUTED"
    row = (await journal.read(suspect.saga_id))[suspect.seq]  # the row after the INTENT
    assert row.phase.value == "EXECUTED"
    assert json.loads(row.payload) == {"$resolution": True, "resolved_by": winner, "result": order}
    await suspect.handle.terminate("test done")
