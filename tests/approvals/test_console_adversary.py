"""Attacks on the web console that succeed: regression tests, each failing until the console is fixed.

Every test runs the app under real uvicorn (``tests.serving.serve``, or a socket of its own where
the client address matters) over the session's real Temporal server and Postgres, and drives it
over HTTP with httpx or in Debian's Chromium. Each docstring says what the attacker does.
"""

from __future__ import annotations

import base64
import re
import socket
import uuid
from collections.abc import AsyncIterator
from urllib.parse import quote, urljoin

import httpx
import pytest
from playwright.async_api import Page, expect
from starlette.types import ASGIApp
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import COOKIE, WebConsole, csrf_token
from sagacity.approvals.http import MAX_BODY, create_app
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaResult, SagaSpec, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals.conftest import StartOrder
from tests.serving import serve
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order.workflows import OrderRequest

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


def console_app(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> ASGIApp:
    """The app as ``approvals serve`` builds it; alice may send confirmations and grant tokens."""
    service = ApprovalService(
        temporal_client,
        approvals,
        approvers={"send_confirmation": ["alice"], "grant_tokens": ["alice"]},
        journal=journal,
    )
    return create_app(service, TOKENS, web=WebConsole(service, journal))


@pytest.fixture
async def console_url(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> AsyncIterator[str]:
    async with serve(console_app(temporal_client, approvals, journal)) as url:
        yield url


@pytest.fixture
async def http(console_url: str) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=console_url, timeout=30) as client:
        yield client


def signed_in(http: httpx.AsyncClient, token: str) -> str:
    """Put ``token``'s session cookie on ``http``; the form token its pages carry."""
    http.cookies.set(COOKIE, token, path="/console")
    return csrf_token(token)


def cursor(text: str) -> str:
    """An inbox ``after`` value: what ``_encode_cursor`` makes, with any text inside."""
    return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")


# -- bad input that is a 500 ---------------------------------------------------------------------


async def test_a_form_token_that_is_not_ascii_is_refused_not_a_500(
    http: httpx.AsyncClient, console_url: str, start_order: StartOrder, journal: JournalStore
) -> None:
    """Attack: a signed-in user (or anything that can make the browser post a form with the
    session cookie) sends ``csrf=%C3%A9``. ``_checked_form`` hands the decoded text to
    ``hmac.compare_digest``, which raises TypeError for non-ASCII str, so approve, reject and
    sign-out answer 500 instead of refusing the form (403) and the README's "never a 500"."""
    waiting = await start_order()
    signed_in(http, "tok-alice")
    page = f"/console/approvals/{waiting.saga_id}/{waiting.seq}"
    before = await journal.read(waiting.saga_id)
    for path, body in [
        (f"{page}/approve", "csrf=%C3%A9"),
        (f"{page}/reject", "csrf=%C3%A9&reason=no"),
        ("/console/sign-out", "csrf=%E2%82%AC"),
    ]:
        answer = await http.post(
            path,
            content=body.encode(),
            headers={"Origin": console_url, "Content-Type": "application/x-www-form-urlencoded"},
        )
        assert answer.status_code == 403, (path, answer.status_code, answer.text[:200])
    assert await journal.read(waiting.saga_id) == before


async def test_an_inbox_cursor_outside_the_datetime_range_is_a_4xx_not_a_500(
    http: httpx.AsyncClient,
) -> None:
    """Attack: ``?after=`` is base64 the client controls. A cursor whose time is 0001-01-01 with a
    +01:00 offset (or 9999-12-31 with -01:00) parses, then ``naive_utc`` overflows converting it
    to UTC (OverflowError, not caught): the inbox page, and the JSON API's ``GET /approvals``
    with the same ``after``, answer 500."""
    signed_in(http, "tok-alice")
    for text in ("0001-01-01T00:00:00+01:00|1|x", "9999-12-31T23:59:59-01:00|1|x"):
        page = await http.get("/console/", params={"after": cursor(text)})
        assert 400 <= page.status_code < 500, (text, page.status_code, page.text[:200])
        api = await http.get(
            "/approvals",
            params={"after": cursor(text)},
            headers={"Authorization": "Bearer tok-alice"},
        )
        assert 400 <= api.status_code < 500, (text, api.status_code, api.text[:200])


async def test_the_public_sign_in_form_is_capped_like_every_other_body(
    http: httpx.AsyncClient,
) -> None:
    """Attack: anyone, without a token, posts a huge body to ``/console/sign-in``. The gate
    skips public paths before its size check, and ``_form`` reads the whole body into memory
    (then ``parse_qs`` over it) before looking at it: an unauthenticated memory and CPU sink.
    Every other body over 64 KiB is a 413 unread (README); this one is read and answered 401."""
    body = b"token=" + b"x" * (4 * 1024 * 1024)
    answer = await http.post(
        "/console/sign-in",
        content=body,
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )
    assert answer.status_code == 413, answer.status_code
    assert len(body) > MAX_BODY


# -- the session cookie --------------------------------------------------------------------------


def _own_address() -> str | None:
    """This machine's non-loopback IPv4 address, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        try:
            probe.connect(("192.0.2.1", 9))  # no packet is sent
        except OSError:
            return None
        address = str(probe.getsockname()[0])
    return None if address.startswith("127.") else address


async def test_the_session_cookie_is_secure_behind_the_tls_proxy_the_readme_asks_for(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> None:
    """Attack: the README says "plain HTTP: put TLS in front of it", and deploy/k8s runs it as a
    Service behind whatever terminates TLS, on another address. The cookie holds the bearer token
    itself and is ``Secure`` only when ``request.url.scheme == "https"``; uvicorn trusts
    ``X-Forwarded-Proto`` from 127.0.0.1 only, so behind that proxy the scheme is ``http`` and the
    cookie is set without ``Secure``. A network attacker then gets the token in clear by making
    the browser load any ``http://`` URL of that host under /console (the cookie has no
    ``__Host-`` prefix or Secure flag to stop it)."""
    address = _own_address()
    if address is None:
        pytest.skip("no non-loopback address to stand for the proxy's")
    app = console_app(temporal_client, approvals, journal)
    async with (
        serve(app, address) as url,
        httpx.AsyncClient(base_url=url) as proxy,
    ):
        # what a TLS-terminating proxy forwards for https://approvals.example/console/sign-in
        answer = await proxy.post(
            "/console/sign-in",
            data={"token": "tok-alice", "next": "/console/"},
            headers={
                "Origin": url,
                "X-Forwarded-Proto": "https",
                "X-Forwarded-For": "203.0.113.7",
            },
        )
    assert answer.status_code == 303
    cookie = answer.headers["set-cookie"]
    assert cookie.startswith(f"{COOKIE}=tok-alice")
    assert "secure" in cookie.lower(), cookie


# -- what an approver is shown --------------------------------------------------------------------


async def test_bidi_controls_in_an_input_cannot_reorder_what_the_approver_sees(
    page: Page,
    console_url: str,
    temporal_client: Client,
    worker: Worker,
) -> None:
    """Attack: the agent (the party the gate guards against) puts Unicode bidi controls in an
    argument of an IRREVERSIBLE call: ``account = "\\u202e9999-cca\\u202c"``. ``_pretty`` dumps
    the input with ``ensure_ascii=False`` and the page shows the controls raw, so Chromium draws
    the value reversed: the approver reads ``"acc-9999"`` on "the exact input", while the tool
    is called with ``9999-cca`` (wrapped in invisible controls). Shown here by where Chromium
    draws the value's first and last characters."""
    value = "\u202e9999-cca\u202c"
    handle = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="grant_tokens", args={"token_amount": 5, "account": value})]),
        id=f"bidi-{uuid.uuid4().hex[:8]}",
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    try:
        await page.goto(f"{console_url}/console/")
        await page.get_by_label("Token").fill("tok-alice")
        await page.get_by_role("button", name="Sign in").click()
        await expect(page.get_by_test_id("principal")).to_have_text("alice")
        await page.goto(
            f"{console_url}/console/approvals/{quote(handle.id, safe='')}/"
            f"{status.pending_approval.journal_seq}"
        )
        shown = page.get_by_test_id("input")
        await expect(shown).to_contain_text("account")
        first, last = await shown.evaluate(
            """(pre, word) => {
                const walk = document.createTreeWalker(pre, NodeFilter.SHOW_TEXT);
                for (let node = walk.nextNode(); node; node = walk.nextNode()) {
                    const at = node.data.indexOf(word);
                    if (at < 0) continue;
                    const left = (i) => {
                        const range = document.createRange();
                        range.setStart(node, i);
                        range.setEnd(node, i + 1);
                        return range.getBoundingClientRect().left;
                    };
                    return [left(at), left(at + word.length - 1)];
                }
                return null;
            }""",
            "9999-cca",
        )
        # in the order the value holds it, left to right: '9' before 'a'
        assert first < last, f"drawn reversed: the approver reads {'9999-cca'[::-1]!r}"
    finally:
        await handle.terminate("test over")


async def test_a_saga_id_with_a_slash_cannot_point_its_inbox_row_at_another_request(
    http: httpx.AsyncClient,
    start_order: StartOrder,
    temporal_client: Client,
    worker: Worker,
) -> None:
    """Attack: whoever names a saga (its Temporal workflow id) names it
    ``x/../../approvals/<victim saga>``. Jinja's ``urlencode`` leaves ``/`` unescaped, so that
    saga's inbox row (its own saga id and tool shown) has a Review link the browser resolves to
    the *victim's* request page; the attacker's own request can never be opened (its path does
    not route). Links must encode a saga id as one path segment."""
    victim = await start_order()
    sid = f"x/../../approvals/{victim.saga_id}"
    handle = await temporal_client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(),
        id=sid,
        task_queue=worker.task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    try:
        signed_in(http, "tok-alice")
        inbox = await http.get("/console/", params={"saga": sid})
        row = re.search(
            rf'data-saga="{re.escape(sid)}">.*?<a class="button" href="([^"]+)">Review</a>',
            inbox.text,
            re.S,
        )
        assert row is not None, "the attacker's row is listed"
        review = httpx.URL(urljoin(f"{http.base_url}/console/", row[1]))
        # as the browser requests it (httpx's .path would show %2F decoded)
        assert (
            review.raw_path.decode()
            == f"/console/approvals/{quote(sid, safe='')}/{status.pending_approval.journal_seq}"
        )
    finally:
        await handle.terminate("test over")


# -- headers --------------------------------------------------------------------------------------


async def test_every_console_response_carries_the_console_headers(
    http: httpx.AsyncClient,
) -> None:
    """Probe: the console's pages carry ``frame-ancestors 'none'`` and ``nosniff``, but
    responses made outside ``render`` do not: static files, the JSON errors FastAPI gives for a
    malformed console path, an unknown console path, a wrong method, and the bundle download.
    (Hardening: none of these is known to be exploitable today; they are framable and
    sniffable.) The bundle, which holds the saga's whole journal, is also sent without
    ``Cache-Control: no-store``, unlike every page."""
    signed_in(http, "tok-alice")
    bundle = await http.get("/console/sagas/x/bundle.zip")
    assert bundle.status_code == 200
    assert bundle.headers.get("cache-control") == "no-store", bundle.headers
    for method, path in [
        ("GET", "/console/static/console.js"),
        ("GET", "/console/approvals/x/not-a-seq"),
        ("GET", "/console/no-such-page"),
        ("DELETE", "/console/"),
        ("GET", "/console/sagas/x/bundle.zip"),
    ]:
        answer = await http.request(method, path)
        assert answer.headers.get("x-content-type-options") == "nosniff", (method, path)
        policy = answer.headers.get("content-security-policy", "")
        assert "frame-ancestors 'none'" in policy, (method, path, answer.status_code)
