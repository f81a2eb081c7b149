"""Approve with changes from each entry point a person uses (issue 32), against the shipped worker
with the dev stack's decision settings: ``sagacity approvals sign --args`` with the plain
``temporal`` CLI, ``sagacity approvals approve --args`` / ``--args-file``, and the HTTP API
signing with the service key. Whether the call ran, and with what, is read from the shop's
outbox; every saga started here is decided before its test ends.
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.http import create_app
from sagacity.evidence.decisions import Signer, load_keyring
from sagacity.journal import Phase
from sagacity.store import ApprovalStore
from sagacity.temporal.models import SagaState, SagaStatus, edited_hash
from tests.approvals import test_sign
from tests.approvals.test_sign import RoundTrip, trip
from tests.approvals.test_signed import Keys, refusals

keys = test_sign.keys
signed_worker = test_sign.signed_worker
__all__ = ["trip"]  # the round-trip fixture, shared with test_sign


async def test_sign_with_args_prints_a_signed_edit_the_temporal_cli_sends(trip: RoundTrip) -> None:
    saga = await trip.waiting()
    signed = await trip.sign(saga.id, saga.seq, "--approve", "--args", '{"order_id": "o-18"}')
    assert signed.code == 0, signed.stderr
    body = json.loads(signed.stdout)
    assert body["args"] == {"order_id": "o-18"}
    assert 'approved with changes: {"order_id":"o-18"}' in signed.stderr
    await trip.signal(saga.id, "approve", signed.stdout.strip())
    assert (await saga.handle.result()).status is SagaState.COMPLETED
    assert await trip.shop.sent("o-18", "confirmation", saga.id) is not None
    assert await trip.outbox() == 1
    row = await trip.decision(saga.id, Phase.APPROVED)
    assert row["decision"] == "approve_edited" and row["edited"] is True
    assert row["approved_input_hash"] == edited_hash({"order_id": "o-18"})

    # a rejection changes nothing, so it takes no arguments
    other = await trip.waiting()
    refused = await trip.sign(other.id, other.seq, "--reject", "--reason", "no", "--args", "{}")
    assert refused.code != 0 and "--args goes with --approve" in refused.stderr
    assert refused.stdout == ""
    rejected = await trip.sign(other.id, other.seq, "--reject", "--reason", "no")
    await trip.signal(other.id, "reject", rejected.stdout.strip())
    assert (await other.handle.result()).status is SagaState.COMPENSATED


async def test_approve_with_args_refuses_what_does_not_fit_then_runs_the_edit(
    trip: RoundTrip, tmp_path: Path
) -> None:
    saga = await trip.waiting()
    env = trip.keys.env()
    for args, said in (
        ('{"order_id": 5}', "do not fit 'send_confirmation'"),
        ("[1, 2]", "--args: must be a JSON object"),
        ('{"order_id": "o-1"', "--args: not valid JSON"),
    ):
        result = await trip.cli(
            "approvals", "approve", saga.id, str(saga.seq), "--args", args, extra_env=env
        )
        assert result.code != 0 and said in result.stderr, result.stderr
        assert "Traceback" not in result.stderr
    # the worker's refusal is recorded; the client's own refusals never reached the saga
    recorded = await refusals(saga.handle, 1)
    assert len(recorded) == 1 and "do not fit" in recorded[0]
    status = await saga.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL
    assert await trip.outbox() == 0

    edit = tmp_path / "edit.json"
    edit.write_text('{"order_id": "o-from-file"}', encoding="utf-8")
    result = await trip.cli(
        "approvals", "approve", saga.id, str(saga.seq), "--args-file", str(edit), extra_env=env
    )
    assert result.code == 0, result.stderr
    assert (await saga.handle.result()).status is SagaState.COMPLETED
    assert await trip.shop.sent("o-from-file", "confirmation", saga.id) is not None
    assert await trip.outbox() == 1


async def test_the_http_api_approves_with_changes_and_answers_422_for_a_bad_edit(
    trip: RoundTrip, temporal_client: Client, approvals: ApprovalStore, keys: Keys
) -> None:
    service = ApprovalService(
        temporal_client,
        approvals,
        signer=Signer.open(keys.service),
        keyring=load_keyring(keys.keyring),
    )
    app = create_app(service, {"t-alice": "alice"})
    saga = await trip.waiting()
    path = f"/approvals/{saga.id}/{saga.seq}/approve"
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://approvals",
        headers={"Authorization": "Bearer t-alice"},
        timeout=60,
    ) as http:
        bad = await http.post(path, json={"args": {"order_id": "o-2", "cc": "x"}})
        assert bad.status_code == 422, bad.text
        assert bad.json()["error"] == "invalid_request"
        assert "do not fit" in bad.json()["detail"]
        not_object = await http.post(path, json={"args": [1]})
        assert not_object.status_code == 422, not_object.text
        good = await http.post(
            path, json={"args": {"order_id": "o-http"}, "input_hash": saga.request.input_hash}
        )
        assert good.status_code == 200, good.text
        assert good.json()["edited"] is True and good.json()["decision"] == "approved"
    assert (await saga.handle.result()).status is SagaState.COMPLETED
    assert await trip.shop.sent("o-http", "confirmation", saga.id) is not None
    row = await trip.decision(saga.id, Phase.APPROVED)
    assert row["decision"] == "approve_edited" and row["by"] == "alice"
