"""The console's Operations page: halts in force and lifted, the halt form, certify's findings.

Over HTTP for the refusals (no form token, a principal who may not operate, bad input, a login
that may not write halts), and in Chromium for an operator halting and resuming a saga.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator

import httpx
import pytest
from playwright.async_api import Page, expect
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import WebConsole, csrf_token
from sagacity.approvals.halts import HaltService
from sagacity.approvals.http import create_app
from sagacity.evidence.decisions import Signer
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore, Pool, open_pool
from sagacity.store.halts import HaltStore
from sagacity.temporal.models import SagaState, SagaStatus
from tests.approvals.conftest import StartOrder
from tests.browser import save_screenshot
from tests.halts import lift_all
from tests.serving import serve
from tests.temporal.conftest import wait_for

TOKENS = {"tok-olivia": "olivia", "tok-bob": "bob"}
ORIGIN = "https://approvals"


@pytest.fixture
async def owner_pool(owner_database_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(owner_database_url)
    yield pool
    await pool.close()
    await lift_all(owner_database_url)


def console_app(
    client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    halts: HaltStore,
    settings: Settings,
) -> object:
    """The app as ``approvals serve`` builds it, signing with the service key that the keyring
    trusts for anyone; olivia may operate, bob may not."""
    assert settings.service_key is not None
    signer, keyring = Signer.open(settings.service_key), settings.load_keyring()
    service = ApprovalService(client, approvals, journal=journal, signer=signer, keyring=keyring)
    web = WebConsole(
        service,
        journal,
        halts=HaltService(client, halts, journal, signer=signer, keyring=keyring),
        operators=["olivia"],
    )
    return create_app(service, TOKENS, web=web)


@pytest.fixture
async def web(
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    owner_pool: Pool,
    settings: Settings,
) -> AsyncIterator[httpx.AsyncClient]:
    app = console_app(temporal_client, approvals, journal, HaltStore(owner_pool), settings)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as client:
        yield client


async def sign_in(web: httpx.AsyncClient, token: str) -> str:
    answer = await web.post(
        "/console/sign-in", data={"token": token, "next": "/console/"}, headers={"Origin": ORIGIN}
    )
    assert answer.status_code == 303
    return csrf_token(token)


async def test_halt_and_resume_from_the_page_and_what_is_refused(
    web: httpx.AsyncClient, start_order: StartOrder, owner_pool: Pool
) -> None:
    waiting = await start_order()
    halts = HaltStore(owner_pool)
    before = await halts.list()
    csrf = await sign_in(web, "tok-olivia")
    page = await web.get("/console/operations")
    assert page.status_code == 200
    assert "No halt is in force" in page.text and "Certify" in page.text
    form = {"csrf": csrf, "saga": waiting.saga_id, "reason": "looks wrong", "policy": "keep"}

    # no form token, another site, bad input: refused, nothing written
    assert (
        await web.post("/console/operations/halt", data={**form, "csrf": ""})
    ).status_code == 403
    other_site = await web.post(
        "/console/operations/halt", data=form, headers={"Origin": "https://evil.example"}
    )
    assert other_site.status_code == 403
    empty = await web.post(
        "/console/operations/halt", data={**form, "reason": " "}, headers={"Origin": ORIGIN}
    )
    assert empty.status_code == 422 and "reason must be plain" in empty.text
    assert await halts.list() == before

    done = await web.post("/console/operations/halt", data=form, headers={"Origin": ORIGIN})
    assert done.status_code == 303
    halt_id = int(re.fullmatch(r"/console/operations\?halted=(\d+)", done.headers["location"])[1])  # type: ignore[index]
    shown = await web.get(done.headers["location"])
    assert f"Halt {halt_id} is in force." in shown.text
    assert f'data-halt="{halt_id}"' in shown.text and "looks wrong" in shown.text
    (halt,) = await halts.list(active=True)
    assert halt.operator == "olivia" and halt.scope.sagas == (waiting.saga_id,)

    lifted = await web.post(
        f"/console/operations/{halt_id}/resume",
        data={"csrf": csrf, "reason": "checked"},
        headers={"Origin": ORIGIN},
    )
    assert lifted.status_code == 303
    assert "Lifted halts" in (await web.get(lifted.headers["location"])).text
    assert await halts.list(active=True) == []
    again = await web.post(
        f"/console/operations/{halt_id}/resume",
        data={"csrf": csrf, "reason": "twice"},
        headers={"Origin": ORIGIN},
    )
    assert again.status_code == 422 and f"no active halt {halt_id}" in again.text


async def test_a_principal_who_may_not_operate_sees_no_form_and_is_refused(
    web: httpx.AsyncClient, owner_pool: Pool
) -> None:
    before = await HaltStore(owner_pool).list()
    csrf = await sign_in(web, "tok-bob")
    page = await web.get("/console/operations")
    assert 'data-testid="halt-form"' not in page.text and "may not halt" in page.text
    refused = await web.post(
        "/console/operations/halt",
        data={"csrf": csrf, "reason": "x", "policy": "keep"},
        headers={"Origin": ORIGIN},
    )
    assert refused.status_code == 403 and "may not halt or resume" in refused.text
    assert await HaltStore(owner_pool).list() == before


async def test_a_console_on_the_workers_login_says_it_may_not_write_halts(
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    owner_pool: Pool,
    settings: Settings,
) -> None:
    before = await HaltStore(owner_pool).list()
    app = console_app(temporal_client, approvals, journal, HaltStore(journal.pool), settings)
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    async with httpx.AsyncClient(transport=transport, base_url=ORIGIN) as web:
        csrf = await sign_in(web, "tok-olivia")
        answer = await web.post(
            "/console/operations/halt",
            data={"csrf": csrf, "reason": "x", "policy": "keep"},
            headers={"Origin": ORIGIN},
        )
    assert answer.status_code == 409
    assert "may not write halts" in answer.text and "SAGACITY_OWNER_DATABASE_URL" in answer.text
    assert await HaltStore(owner_pool).list() == before


@pytest.fixture
async def console_url(
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    owner_pool: Pool,
    settings: Settings,
) -> AsyncIterator[str]:
    app = console_app(temporal_client, approvals, journal, HaltStore(owner_pool), settings)
    async with serve(app) as url:  # type: ignore[arg-type]
        yield url


async def test_an_operator_halts_a_saga_in_the_browser_and_resumes_it(
    page: Page, console_url: str, start_order: StartOrder
) -> None:
    waiting = await start_order()
    await page.goto(f"{console_url}/console/")
    await page.get_by_label("Token").fill("tok-olivia")
    await page.get_by_role("button", name="Sign in").click()
    await page.get_by_role("link", name="Operations").click()
    await expect(page.get_by_test_id("no-halt")).to_be_visible(timeout=30_000)

    form = page.get_by_test_id("halt-form")
    await form.get_by_label("Saga").fill(waiting.saga_id)
    await form.get_by_label("Policy").select_option("compensate")
    await form.get_by_label("Reason").fill("agent ordered the wrong product")
    await form.get_by_role("button", name="Halt").click()
    # the page certifies the session's recent sagas: give it time on a busy machine
    await expect(page.get_by_role("status")).to_contain_text("is in force", timeout=30_000)
    row = page.get_by_test_id("halt")
    await expect(row).to_contain_text(waiting.saga_id)
    await expect(row).to_contain_text("compensate")
    await expect(row).to_contain_text("verified")  # signed by the service key for olivia
    await save_screenshot(page, "console-operations")

    # the saga waits at its approval gate: under compensate it keeps waiting
    status: SagaStatus = await waiting.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL
    await row.get_by_label(re.compile("reason to lift")).fill("false alarm")
    await row.get_by_role("button", name="Resume").click()
    await expect(page.get_by_role("status")).to_contain_text("is lifted", timeout=30_000)
    await expect(page.get_by_test_id("no-halt")).to_be_visible()
    await wait_for(waiting.handle, lambda s: s.state is SagaState.AWAITING_APPROVAL)
