"""The browser set-up works end to end: Debian's Chromium, driven by Playwright, clicks a button on
a page served over real HTTP on localhost, and the page changes (a screenshot is kept)."""

from __future__ import annotations

from playwright.async_api import Page, expect
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse
from starlette.routing import Route

from tests.browser import SCREENSHOTS, save_screenshot
from tests.serving import serve

PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>smoke</title></head>
<body>
  <button id="go">Approve</button>
  <p id="state">waiting</p>
  <script>
    document.getElementById("go").addEventListener("click", async () => {
      const answer = await fetch("/clicked", {method: "POST"}).then(r => r.json());
      document.getElementById("state").textContent = `approved (${answer.clicks})`;
    });
  </script>
</body></html>
"""


def smoke_app() -> tuple[Starlette, list[str]]:
    clicks: list[str] = []

    async def index(request: Request) -> HTMLResponse:
        return HTMLResponse(PAGE)

    async def clicked(request: Request) -> JSONResponse:
        clicks.append(request.headers.get("user-agent", ""))
        return JSONResponse({"clicks": len(clicks)})

    routes = [Route("/", index), Route("/clicked", clicked, methods=["POST"])]
    return Starlette(routes=routes), clicks


async def test_chromium_clicks_a_button_on_a_served_page(page: Page) -> None:
    app, clicks = smoke_app()
    async with serve(app) as url:
        await page.goto(url)
        await expect(page.locator("#state")).to_have_text("waiting")
        await page.click("#go")
        await expect(page.locator("#state")).to_have_text("approved (1)")
        shot = await save_screenshot(page, "smoke-after-click")
    assert len(clicks) == 1 and "Chrome" in clicks[0]
    assert shot.parent == SCREENSHOTS and shot.stat().st_size > 0
