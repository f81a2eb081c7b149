"""Every HTTP server of the project answers a method a path does not take with 405 and an
``Allow`` header naming those it does (RFC 9110): the approvals API, its console and codec
routes, the witness, and the worker's metrics and probes. (The MCP gateway's HTTP transport:
``tests/mcp/test_gateway_leaving.py``.) And the console refuses a form another site posts
when the browser names the site only in ``Sec-Fetch-Site`` (no ``Origin``, no ``Referer``)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.codec_server import CodecServer
from sagacity.approvals.console import COOKIE, WebConsole, csrf_token
from sagacity.approvals.http import create_app
from sagacity.devwitness import DevWitness
from sagacity.observability.http import ProbeServer
from sagacity.store import ApprovalStore, JournalStore
from tests.approvals.conftest import StartOrder

TOKENS = {"tok-alice": "alice"}
ORIGIN = "https://approvals"


@pytest.fixture
async def web(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> AsyncIterator[httpx.AsyncClient]:
    """The app as ``approvals serve`` builds it (console and codec routes), alice signed in to
    the console and holding the API's token."""
    codec = temporal_client.data_converter.payload_codec
    assert codec is not None
    service = ApprovalService(
        temporal_client, approvals, approvers={"send_confirmation": ["alice"]}, journal=journal
    )
    app = create_app(service, TOKENS, codec=CodecServer(codec), web=WebConsole(service, journal))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url=ORIGIN,
        headers={"Authorization": "Bearer tok-alice"},
    ) as client:
        client.cookies.set(COOKIE, "tok-alice", path="/console")
        yield client


def allowed(response: httpx.Response) -> set[str]:
    assert response.status_code == 405, (response.status_code, response.text[:300])
    return {m.strip() for m in response.headers.get("allow", "").split(",") if m.strip()}


async def test_the_approvals_api_console_and_codec_say_what_they_allow(
    web: httpx.AsyncClient,
) -> None:
    for method, path, allows in [
        ("PUT", "/approvals", {"GET"}),
        ("DELETE", "/approvals/order-1/5", {"GET"}),
        ("GET", "/approvals/order-1/5/approve", {"POST"}),
        ("PATCH", "/sagas/order-1/suspects/3/resolve", {"POST"}),
        ("GET", "/codec/decode", {"POST"}),
        ("PUT", "/console/", {"GET"}),
        ("DELETE", "/console/sign-in", {"GET", "POST"}),
        ("POST", "/console/static/console.css", {"GET", "HEAD"}),
    ]:
        answer = await web.request(method, path)
        assert allowed(answer) >= allows, (method, path, answer.headers)
        if not path.startswith("/console"):
            assert answer.json()["error"] == "method_not_allowed"


async def test_the_witness_says_what_it_allows(tmp_path: Path) -> None:
    witness = DevWitness(tmp_path, port=0)
    witness.start()
    try:
        async with httpx.AsyncClient(base_url=witness.url) as client:
            assert allowed(await client.get("/add-checkpoint")) == {"POST"}
            assert allowed(await client.delete("/checkpoint")) >= {"GET"}
    finally:
        witness.stop()


async def test_the_metrics_and_probes_say_what_they_allow() -> None:
    probes = ProbeServer("127.0.0.1:0", alive=lambda: True, ready=lambda: True).start()
    try:
        async with httpx.AsyncClient(base_url=f"http://{probes.address}") as client:
            for method in ("POST", "PUT", "DELETE"):
                assert allowed(await client.request(method, "/metrics")) == {"GET", "HEAD"}
            head = await client.head("/healthz")
            assert head.status_code == 200 and head.content == b""
            assert (await client.get("/healthz")).text == "ok\n"
    finally:
        await asyncio.to_thread(probes.stop)


async def test_a_form_posted_from_another_site_named_only_by_sec_fetch_site_is_refused(
    web: httpx.AsyncClient, start_order: StartOrder, journal: JournalStore
) -> None:
    """A browser (or an extension) that strips Origin and Referer still sends Sec-Fetch-Site:
    cross-site (or same-site: a sibling host) is another origin, and decides nothing."""
    waiting = await start_order()
    page = f"/console/approvals/{waiting.saga_id}/{waiting.seq}"
    shown = await web.get(page)
    hash_ = re.search(r'data-testid="input-hash">([0-9a-f]{64})<', shown.text)
    assert hash_ is not None
    form = {"csrf": csrf_token("tok-alice"), "input_hash": hash_[1]}
    before = await journal.read(waiting.saga_id)
    for site in ("cross-site", "same-site"):
        forged = await web.post(f"{page}/approve", data=form, headers={"Sec-Fetch-Site": site})
        assert forged.status_code == 403, (site, forged.status_code, forged.text[:300])
    signed_in = await web.post(
        "/console/sign-in", data={"token": "tok-alice"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert signed_in.status_code == 401
    assert await journal.read(waiting.saga_id) == before
    # this site's own form (the browser says same-origin) is taken
    taken = await web.post(f"{page}/approve", data=form, headers={"Sec-Fetch-Site": "same-origin"})
    assert taken.status_code == 303, (taken.status_code, taken.text[:300])
