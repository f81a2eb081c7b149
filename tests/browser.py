"""Browser tests: Debian's Chromium driven through Playwright's async API, screenshots as artifacts.

Chromium is the system's ``/usr/bin/chromium`` (``make test`` installs it with apt-get when run as
root); Playwright never downloads a browser of its own here. Without it, every test that asks for
``browser`` or ``page`` skips, saying how to install it.

Fixtures (``tests/conftest.py`` shares them by name, so any test can ask for them):

* ``browser`` (session): one headless Chromium for the session, started on first use. Each launch
  gets a fresh, empty temporary profile (``--user-data-dir``), which Playwright creates and
  removes; it refuses a ``--user-data-dir`` in ``args``.
* ``page`` (function): a page in a fresh browser context (no cookies or storage shared between
  tests). When the test fails, a screenshot of it is saved as an artifact.

Pages are served with :func:`tests.serving.serve`. Helpers:

* :func:`save_screenshot`: ``artifacts/screenshots/<name>.png`` under the repository (git-ignored,
  for CI to keep); prints the path.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator, Generator
from pathlib import Path

import pytest
from playwright.async_api import Browser, Page, async_playwright

CHROMIUM = Path("/usr/bin/chromium")

#: headless, and nothing that reaches out: on a closed network Chromium's own background
#: connections (component updates, sync, QUIC probes) are refused, many at a time
CHROMIUM_ARGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
SCREENSHOTS = ARTIFACTS / "screenshots"

_FAILED = pytest.StashKey[bool]()


def chromium_missing() -> str | None:
    """Why browser tests cannot run here, or None when they can."""
    if os.access(CHROMIUM, os.X_OK):
        return None
    return (
        f"no {CHROMIUM}: install Debian's Chromium as root with "
        "`apt-get install --no-install-recommends chromium` (make test does it when run as root)"
    )


@pytest.fixture(scope="session")
async def browser() -> AsyncIterator[Browser]:
    if (reason := chromium_missing()) is not None:
        pytest.skip(reason)
    async with async_playwright() as playwright:
        chromium = await playwright.chromium.launch(
            executable_path=CHROMIUM, args=list(CHROMIUM_ARGS)
        )
        try:
            yield chromium
        finally:
            await chromium.close()


@pytest.fixture
async def page(browser: Browser, request: pytest.FixtureRequest) -> AsyncIterator[Page]:
    context = await browser.new_context()
    try:
        opened = await context.new_page()
        yield opened
        if request.node.stash.get(_FAILED, False):
            await save_screenshot(opened, f"{request.node.name}-failed")
    finally:
        await context.close()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """Note a failed test body, for ``page`` to leave a screenshot of it."""
    report = yield
    if report.when == "call" and report.failed:
        item.stash[_FAILED] = True
    return report


async def save_screenshot(page: Page, name: str) -> Path:
    """Save a full-page screenshot as ``artifacts/screenshots/<name>.png``; return its path."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("._") or "screenshot"
    path = SCREENSHOTS / f"{safe}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    await page.screenshot(path=path, full_page=True)
    print(f"screenshot: {path}")
    return path
