"""The web console over HTTP (no browser): sign-in, the inbox, a decision, the saga's page.

``tests/approvals/test_console_browser.py`` drives the same pages in Chromium.
"""

from __future__ import annotations

import io
import re
import zipfile
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import COOKIE, WebConsole, csrf_token
from sagacity.approvals.http import create_app
from sagacity.evidence.bundle import verify_bundle
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import StartOrder

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
ORIGIN = "https://approvals"


@pytest.fixture
async def web(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> AsyncIterator[httpx.AsyncClient]:
    """The app as ``approvals serve`` builds it; alice may send confirmations, bob may not."""
    service = ApprovalService(
        temporal_client, approvals, approvers={"send_confirmation": ["alice"]}, journal=journal
    )
    app = create_app(service, TOKENS, web=WebConsole(service, journal))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
        yield client


async def sign_in(web: httpx.AsyncClient, token: str) -> str:
    """Sign in with ``token``; the form token the session's pages carry."""
    answer = await web.post(
        "/console/sign-in", data={"token": token, "next": "/console/"}, headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 303 and answer.headers["location"] == "/console/"
    cookie = answer.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/console" in cookie
    assert "Secure" in cookie
    return csrf_token(token)


async def test_signed_out_pages_send_to_sign_in_and_a_wrong_token_gets_no_data(
    web: httpx.AsyncClient, start_order: StartOrder
) -> None:
    waiting = await start_order()
    page = f"/console/approvals/{waiting.saga_id}/{waiting.seq}"
    for path in ("/console/", page, f"/console/sagas/{waiting.saga_id}"):
        answer = await web.get(path)
        assert answer.status_code == 303
        assert answer.headers["location"].startswith("/console/sign-in?next=")
    wrong = await web.post("/console/sign-in", data={"token": "tok-mallory"})
    assert wrong.status_code == 401 and "not accepted" in wrong.text
    assert waiting.saga_id not in wrong.text and COOKIE not in wrong.headers.get("set-cookie", "")
    web.cookies.set(COOKIE, "tok-mallory", path="/console")
    assert (await web.get("/console/")).status_code == 303
    # a sign-in never sends the browser elsewhere
    await sign_in(web, "tok-alice")
    away = await web.post(
        "/console/sign-in", data={"token": "tok-alice", "next": "https://evil.example/x"}
    )
    assert away.headers["location"] == "/console/"


async def test_the_cookie_opens_the_console_only_never_the_api(web: httpx.AsyncClient) -> None:
    await sign_in(web, "tok-alice")
    assert (await web.get("/console/")).status_code == 200
    refused = await web.get("/approvals")
    assert refused.status_code == 401  # the API reads bearer tokens, not the console's cookie


async def test_inbox_request_and_approval_run_the_call_once(
    web: httpx.AsyncClient, start_order: StartOrder, journal: JournalStore
) -> None:
    waiting = await start_order()
    csrf = await sign_in(web, "tok-alice")

    inbox = await web.get("/console/", params={"saga": waiting.saga_id})
    assert inbox.status_code == 200
    assert "send_confirmation" in inbox.text and waiting.saga_id in inbox.text
    assert "alice" in inbox.text  # who may decide
    assert "default-src 'self'" in inbox.headers["content-security-policy"]

    page = f"/console/approvals/{waiting.saga_id}/{waiting.seq}"
    shown = await web.get(page)
    assert shown.status_code == 200
    hash_ = re.search(r'data-testid="input-hash">([0-9a-f]{64})<', shown.text)
    assert hash_ is not None
    assert "AWAITING_APPROVAL" in shown.text  # the journal so far

    # a form without the session's token, or from another site, changes nothing
    before = await journal.read(waiting.saga_id)
    forged = [
        await web.post(f"{page}/approve", data={"input_hash": hash_[1]}),
        await web.post(
            f"{page}/approve",
            data={"csrf": csrf, "input_hash": hash_[1]},
            headers={"Origin": "https://evil.example"},
        ),
        await web.post(f"{page}/approve", data={"csrf": "0" * 64, "input_hash": hash_[1]}),
    ]
    assert [f.status_code for f in forged] == [403, 403, 403]
    assert await journal.read(waiting.saga_id) == before

    approved = await web.post(
        f"{page}/approve", data={"csrf": csrf, "input_hash": hash_[1]}, headers={"Origin": ORIGIN}
    )
    assert approved.status_code == 303
    assert approved.headers["location"] == f"/console/sagas/{waiting.saga_id}?done=approved"
    assert (await waiting.handle.result()).status is SagaState.COMPLETED

    saga = await web.get(approved.headers["location"])
    assert saga.status_code == 200 and "Your decision was taken: approved" in saga.text
    assert '<dd data-testid="state">completed</dd>' in saga.text
    assert 'data-testid="node-gate" data-status="approved"' in saga.text
    assert "verified" in saga.text and "chain intact" in saga.text
    assert 'data-testid="node-compensation"' not in saga.text

    again = await web.post(
        f"{page}/approve", data={"csrf": csrf, "input_hash": hash_[1]}, headers={"Origin": ORIGIN}
    )
    assert again.status_code == 404  # decided: no longer a request
    phases = [r.phase.value for r in await journal.read(waiting.saga_id)]
    assert phases.count("APPROVED") == 1


async def test_a_rejection_draws_the_rollback_and_the_bundle_verifies(
    web: httpx.AsyncClient, start_order: StartOrder, tmp_path: Path
) -> None:
    waiting = await start_order()
    csrf = await sign_in(web, "tok-alice")
    page = f"/console/approvals/{waiting.saga_id}/{waiting.seq}"

    empty = await web.post(f"{page}/reject", data={"csrf": csrf, "reason": " "})
    assert empty.status_code == 422 and "give a reason" in empty.text
    rejected = await web.post(f"{page}/reject", data={"csrf": csrf, "reason": "wrong address"})
    assert rejected.status_code == 303
    assert (await waiting.handle.result()).status is SagaState.COMPENSATED

    saga = await web.get(f"/console/sagas/{waiting.saga_id}")
    assert '<dd data-testid="state">compensated</dd>' in saga.text
    assert 'data-testid="node-gate" data-status="rejected"' in saga.text
    assert saga.text.count('data-testid="node-compensation" data-status="compensated"') == 2
    assert saga.text.count('data-testid="node-call" data-status="executed"') == 2

    bundle = await web.get(f"/console/sagas/{waiting.saga_id}/bundle.zip")
    assert bundle.status_code == 200 and bundle.headers["content-type"] == "application/zip"
    zipfile.ZipFile(io.BytesIO(bundle.content)).extractall(tmp_path)
    report = verify_bundle(tmp_path / "bundle")
    assert [s.ok for s in report.sagas] == [True]


async def test_bob_sees_the_request_but_may_not_decide_it(
    web: httpx.AsyncClient, start_order: StartOrder
) -> None:
    waiting = await start_order()
    csrf = await sign_in(web, "tok-bob")
    page = f"/console/approvals/{waiting.saga_id}/{waiting.seq}"
    shown = await web.get(page)
    assert "may not decide calls of send_confirmation" in shown.text
    assert 'data-testid="approve"' not in shown.text
    refused = await web.post(f"{page}/approve", data={"csrf": csrf})
    assert refused.status_code == 403 and "bob" in refused.text  # as the API answers
    assert (await web.get(page)).status_code == 200  # still waiting


async def test_an_unknown_saga_is_a_page_saying_so(web: httpx.AsyncClient) -> None:
    await sign_in(web, "tok-alice")
    missing = await web.get("/console/sagas/no-such-saga")
    assert missing.status_code == 404 and "No such saga" in missing.text
    request = await web.get("/console/approvals/no-such-saga/5")
    assert request.status_code == 404 and "No such request" in request.text


async def test_bad_input_to_the_console_is_a_4xx_and_changes_nothing(
    web: httpx.AsyncClient, start_order: StartOrder, journal: JournalStore
) -> None:
    waiting = await start_order()
    csrf = await sign_in(web, "tok-alice")
    sid = waiting.saga_id
    before = await journal.read(sid)
    for method, url, body in [
        ("GET", "/console/?tool=a%00b", None),
        ("GET", "/console/?saga=%00", None),
        ("GET", "/console/?age=forever", None),
        ("GET", "/console/?after=bm90IGEgY3Vyc29y", None),
        ("GET", "/console/?limit=x", None),
        ("GET", "/console/sagas/a%00b", None),
        ("GET", f"/console/approvals/{sid}/{2**70}", None),
        ("GET", f"/console/approvals/{sid}/-1", None),
        ("GET", "/console/approvals/a%00b/5", None),
        ("GET", "/console/sagas/a%00b/bundle.zip", None),
        ("POST", f"/console/approvals/{sid}/{waiting.seq}/reject", b"csrf=" + csrf.encode() + b"&reason=%FF%FE"),
        ("POST", f"/console/approvals/{sid}/{waiting.seq}/reject", f"csrf={csrf}&reason=a%00b".encode()),
        ("POST", f"/console/approvals/{sid}/{waiting.seq}/reject", f"csrf={csrf}&reason=" .encode() + b"x" * 70_000),
        ("POST", "/console/sign-in", b"token=%ED%A0%80"),
    ]:  # fmt: skip
        answer = await web.request(method, url, content=body, headers={"Origin": ORIGIN})
        assert 400 <= answer.status_code < 500, (method, url, answer.status_code, answer.text[:300])
    assert await journal.read(sid) == before
    assert (await web.get(f"/console/approvals/{sid}/{waiting.seq}")).status_code == 200
