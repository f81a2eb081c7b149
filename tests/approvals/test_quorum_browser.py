"""A 2-of-3 decision in the web console, in a real browser (Debian's Chromium through
Playwright): alice's approval is counted and the request page says "1 of 2 approvals (finance):
alice"; bob, signed in on his own, approves and the call runs; the APPROVED row lists both, signed
by the console's service key (which vouches for whom it authenticated), and verifies.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, expect
from temporalio.client import Client

from sagacity.approvals.console import WebConsole
from sagacity.approvals.http import create_app
from sagacity.journal import Phase
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals import test_quorum
from tests.approvals.test_console_browser import page_errors, sign_in
from tests.approvals.test_decisions_bound import Verifier
from tests.approvals.test_quorum import Start, signed_service
from tests.approvals.test_signed import Keys
from tests.browser import save_screenshot
from tests.serving import serve
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_crash import WorkerProcess

keys = test_quorum.keys
anchors = test_quorum.anchors
verifier = test_quorum.verifier
people = test_quorum.people
quorum_worker = test_quorum.quorum_worker
start = test_quorum.start


@pytest.fixture
async def console_url(
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    settings: Settings,
    keys: Keys,
    people: dict[str, Path],
    quorum_worker: WorkerProcess,
) -> AsyncIterator[str]:
    """The console as ``sagacity approvals serve`` runs it (the keyring names the group)."""
    service = signed_service(temporal_client, approvals, journal, settings, keys)
    tokens = {"tok-alice": "alice", "tok-bob": "bob"}
    async with serve(create_app(service, tokens, web=WebConsole(service, journal))) as url:
        yield url


async def test_two_people_approve_a_two_of_three_call_in_the_browser(
    page: Page,
    browser: Browser,
    console_url: str,
    start: Start,
    journal: JournalStore,
    verifier: Verifier,
) -> None:
    handle = await start(900)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    request = f"{console_url}/console/approvals/{handle.id}/{status.pending_approval.journal_seq}"

    await sign_in(page, console_url, "tok-alice")
    await expect(page.get_by_test_id("principal")).to_have_text("alice")
    errors = page_errors(page)
    await page.goto(request)
    approvals = page.get_by_test_id("approvals")
    await expect(approvals).to_contain_text("0 of 2 approvals (finance)")
    await expect(approvals).to_contain_text("not dave, who started the saga")
    # co-approvers each vouch for the call as proposed: no approve-with-changes form
    await expect(page.get_by_test_id("approve-edited")).to_have_count(0)
    await page.get_by_test_id("approve").click()
    await expect(page.get_by_test_id("co-approved")).to_contain_text("needs more approvals")
    await page.goto(request)
    await expect(page.get_by_test_id("approvals")).to_contain_text(
        "1 of 2 approvals (finance): alice"
    )
    await save_screenshot(page, "console-co-approval")
    assert [e.phase for e in await journal.read(handle.id)][-1] is Phase.AWAITING_APPROVAL

    # bob, in a browser context of his own
    context = await browser.new_context()
    try:
        bob = await context.new_page()
        await sign_in(bob, console_url, "tok-bob")
        await expect(bob.get_by_test_id("principal")).to_have_text("bob")
        await bob.goto(request)
        await bob.get_by_test_id("approve").click()
        await expect(bob.get_by_role("status")).to_contain_text("approved")
        await expect(bob.get_by_test_id("state")).to_have_text("completed", timeout=30_000)
    finally:
        await context.close()
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPLETED, result
    rows = await journal.read(handle.id)
    approved = next(r for r in rows if r.phase is Phase.APPROVED)
    assert [a["by"] for a in json.loads(approved.payload)["approvals"]] == ["alice", "bob"]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline
    assert errors == []
