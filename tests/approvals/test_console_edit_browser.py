"""Approve with changes in the web console, in a real browser (Debian's Chromium through
Playwright): the form comes prefilled with the proposed arguments, shows what an edit changes
before it is sent, refuses arguments that do not fit the tool with the request still open, and
runs the edited call.
"""

from __future__ import annotations

import json

from playwright.async_api import Page, expect

from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import StartOrder
from tests.approvals.test_console_browser import console_url, page_errors, sign_in
from tests.browser import save_screenshot
from workflows.order.shop import Shop

__all__ = ["console_url"]  # the fixture, shared with the console's other browser tests


async def test_edit_and_approve_in_the_browser_runs_the_edited_call(
    page: Page, console_url: str, start_order: StartOrder, journal: JournalStore, shop: Shop
) -> None:
    waiting = await start_order()
    await sign_in(page, console_url, "tok-alice")
    await expect(page.get_by_test_id("principal")).to_have_text("alice")
    await page.goto(f"{console_url}/console/approvals/{waiting.saga_id}/{waiting.seq}")
    args = page.get_by_test_id("args")
    proposed = json.loads(await args.input_value())
    assert set(proposed) == {"order_id"}

    # arguments the tool does not take: refused, shown, and the request is still open
    await args.fill(json.dumps({"order_id": "o-edited", "cc": "mallory@example.com"}))
    await expect(page.get_by_test_id("changes")).to_contain_text('cc: (none) → "mallory@')
    await page.get_by_test_id("approve-edited").click()
    await expect(page.get_by_test_id("error")).to_contain_text("do not fit 'send_confirmation'")
    assert [e.phase for e in await journal.read(waiting.saga_id)][-1] is Phase.AWAITING_APPROVAL
    errors = page_errors(page)  # from here on: the refusal's page came with its 422

    await page.get_by_test_id("args").fill(json.dumps({"order_id": "o-edited"}))
    changes = page.get_by_test_id("changes")
    await expect(changes).to_have_text(f'order_id: "{proposed["order_id"]}" → "o-edited"')
    await save_screenshot(page, "console-approve-with-changes")
    await page.get_by_test_id("approve-edited").click()

    await expect(page.get_by_role("status")).to_contain_text("approved")
    await expect(page.get_by_test_id("state")).to_have_text("completed", timeout=30_000)
    assert (await waiting.handle.result()).status is SagaState.COMPLETED
    assert await shop.sent("o-edited", "confirmation", waiting.saga_id) is not None
    assert await shop.sent(proposed["order_id"], "confirmation", waiting.saga_id) is None
    rows = await journal.read(waiting.saga_id)
    approved = next(r for r in rows if r.phase is Phase.APPROVED)
    assert json.loads(approved.input) == {"order_id": "o-edited"}
    assert json.loads(approved.payload)["edited"] is True
    assert errors == []
