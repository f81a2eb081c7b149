"""The web console in a real browser (Debian's Chromium through Playwright): sign in, see a waiting
call, approve it and watch the saga complete, reject another and see its rollback drawn.

Screenshots of the inbox, a request and a saga's timeline are saved as artifacts
(``artifacts/screenshots/``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from playwright.async_api import Page, expect
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import WebConsole
from sagacity.approvals.http import create_app
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import StartOrder
from tests.browser import save_screenshot
from tests.serving import serve

TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}


@pytest.fixture
async def console_url(
    temporal_client: Client, approvals: ApprovalStore, journal: JournalStore
) -> AsyncIterator[str]:
    service = ApprovalService(
        temporal_client, approvals, approvers={"send_confirmation": ["alice"]}, journal=journal
    )
    async with serve(create_app(service, TOKENS, web=WebConsole(service, journal))) as url:
        yield url


async def sign_in(page: Page, url: str, token: str) -> None:
    await page.goto(f"{url}/console/")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()
    await page.get_by_label("Token").fill(token)
    await page.get_by_role("button", name="Sign in").click()


async def test_a_wrong_token_gets_the_sign_in_page_and_no_data(
    page: Page, console_url: str, start_order: StartOrder
) -> None:
    waiting = await start_order()
    await sign_in(page, console_url, "tok-mallory")
    await expect(page.get_by_role("alert")).to_have_text("That token was not accepted.")
    assert waiting.saga_id not in await page.content()
    await page.goto(f"{console_url}/console/approvals/{waiting.saga_id}/{waiting.seq}")
    await expect(page.get_by_role("heading", name="Sign in")).to_be_visible()


async def test_approve_in_the_browser_and_watch_the_saga_complete(
    page: Page, console_url: str, start_order: StartOrder
) -> None:
    waiting = await start_order()
    await sign_in(page, console_url, "tok-alice")
    await expect(page.get_by_test_id("principal")).to_have_text("alice")
    row = page.get_by_test_id("request").filter(has_text=waiting.saga_id)
    await expect(row).to_contain_text("send_confirmation")
    await save_screenshot(page, "console-inbox")

    await row.get_by_role("link", name="Review").click()
    await expect(page.get_by_role("heading", name="Approve send_confirmation?")).to_be_visible()
    await expect(page.get_by_test_id("input")).to_contain_text('"order_id"')
    await save_screenshot(page, "console-request")
    await page.get_by_test_id("approve").click()

    await expect(page.get_by_role("status")).to_contain_text("approved")
    # the page reloads itself while the saga runs
    await expect(page.get_by_test_id("state")).to_have_text("completed", timeout=30_000)
    await expect(page.locator('[data-testid="node-gate"][data-status="approved"]')).to_have_count(1)
    await expect(page.get_by_test_id("verification")).to_contain_text("verified")
    assert (await waiting.handle.result()).status is SagaState.COMPLETED


async def test_reject_in_the_browser_draws_the_rollback_fork(
    page: Page, console_url: str, start_order: StartOrder
) -> None:
    waiting = await start_order()
    await sign_in(page, console_url, "tok-alice")
    await page.goto(f"{console_url}/console/approvals/{waiting.saga_id}/{waiting.seq}")
    await page.get_by_label("Reason for rejecting (journaled)").fill("wrong address")
    await page.get_by_test_id("reject").click()

    await expect(page.get_by_test_id("state")).to_have_text("compensated", timeout=30_000)
    undone = page.locator('[data-testid="node-compensation"][data-status="compensated"]')
    await expect(undone).to_have_count(2)
    await expect(page.locator('[data-testid="node-gate"][data-status="rejected"]')).to_have_count(1)
    await save_screenshot(page, "console-saga-rollback")
    assert (await waiting.handle.result()).status is SagaState.COMPENSATED
