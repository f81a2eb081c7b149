"""The web console in a real browser (Debian's Chromium through Playwright): sign in, see a waiting
call, approve it and watch the saga complete, reject another and see its rollback drawn (the SVG
``sagacity saga graph`` draws), and a journal's hostile text shown as text.

Screenshots of the inbox, a request and a saga's timeline are saved as artifacts
(``artifacts/screenshots/``).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator

import pytest
from playwright.async_api import ConsoleMessage, Locator, Page, expect
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import WebConsole
from sagacity.approvals.http import create_app
from sagacity.journal import Draft, Phase
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


def page_errors(page: Page) -> list[str]:
    """What the page reports as broken from now on: console errors (a CSP refusal is one) and
    uncaught exceptions."""
    errors: list[str] = []

    def console(message: ConsoleMessage) -> None:
        # Chromium asks for /favicon.ico on its own; outside the console the API refuses it
        if message.type == "error" and not message.location["url"].endswith("/favicon.ico"):
            errors.append(message.text)

    page.on("console", console)
    page.on("pageerror", lambda e: errors.append(str(e)))
    return errors


async def expect_drawn(page: Page, statuses: list[str], tools: list[str]) -> Locator:
    """The saga's picture is on the page: a box for each call, in ``statuses``, each tool named."""
    graph = page.get_by_test_id("saga-graph")
    await expect(graph).to_be_visible()
    calls = graph.locator('[data-testid="node-call"]')
    await expect(calls).to_have_count(len(statuses))
    assert [await c.get_attribute("data-status") for c in await calls.all()] == statuses
    for call in await calls.all():
        box = await call.locator("rect").bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 40
    for tool in tools:
        await expect(graph.get_by_text(tool, exact=True)).to_be_visible()
    return graph


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
    errors = page_errors(page)  # signed in: the sign-in page's 401 is no error
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
    tools = ["reserve_inventory", "create_order", "send_confirmation"]
    graph = await expect_drawn(page, ["executed"] * 3, tools)
    await expect(graph.get_by_text("by alice", exact=True)).to_be_visible()
    assert (await waiting.handle.result()).status is SagaState.COMPLETED
    assert errors == []


async def test_reject_in_the_browser_draws_the_rollback_fork(
    page: Page, console_url: str, start_order: StartOrder
) -> None:
    waiting = await start_order()
    await sign_in(page, console_url, "tok-alice")
    await expect(page.get_by_test_id("principal")).to_have_text("alice")
    errors = page_errors(page)
    await page.goto(f"{console_url}/console/approvals/{waiting.saga_id}/{waiting.seq}")
    await page.get_by_label("Reason for rejecting (journaled)").fill("wrong address")
    await page.get_by_test_id("reject").click()

    await expect(page.get_by_test_id("state")).to_have_text("compensated", timeout=30_000)
    undone = page.locator('[data-testid="node-compensation"][data-status="compensated"]')
    await expect(undone).to_have_count(2)
    await expect(page.locator('[data-testid="node-gate"][data-status="rejected"]')).to_have_count(1)
    graph = await expect_drawn(page, ["executed"] * 2, ["reserve_inventory", "create_order"])
    await expect(graph.get_by_text("undo create_order", exact=True)).to_be_visible()
    await expect(graph.get_by_text("by alice: wrong address", exact=True)).to_be_visible()
    await save_screenshot(page, "console-saga-rollback")
    assert (await waiting.handle.result()).status is SagaState.COMPENSATED
    assert errors == []


HOSTILE = "</text><script>window.pwned = 1</script><img src=x onerror=alert(1)>"


async def test_hostile_journal_text_is_drawn_as_text(
    page: Page, console_url: str, journal: JournalStore
) -> None:
    # rows as a tool with a hostile name and error would leave them (its saga long gone)
    saga_id = f"hostile-{uuid.uuid4().hex[:8]}"
    error = json.dumps({"type": "Boom", "message": HOSTILE, "effect": "unknown"})
    for phase, payload in ((Phase.INTENT, ""), (Phase.FAILED, error)):
        await journal.append(Draft(saga_id, HOSTILE, phase, input="{}", payload=payload))
    await sign_in(page, console_url, "tok-alice")
    await expect(page.get_by_test_id("principal")).to_have_text("alice")
    errors = page_errors(page)
    dialogs: list[str] = []
    page.on("dialog", lambda d: dialogs.append(d.message))
    await page.goto(f"{console_url}/console/sagas/{saga_id}")

    graph = await expect_drawn(page, ["failed"], [])
    title = graph.locator('[data-testid="node-call"] title')
    await expect(title).to_contain_text(HOSTILE)  # the whole name, as text
    await expect(graph.locator("script, img")).to_have_count(0)
    assert await page.evaluate("window.pwned") is None
    assert dialogs == [] and errors == []
