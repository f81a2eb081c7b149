"""The console's saga page names what a terminated saga left live, and an operator rolls it back
there; the form is refused without its token, from another site, and to a principal who may not
operate. Over HTTP, against real Temporal and Postgres."""

from __future__ import annotations

import asyncio

import httpx
from temporalio.client import Client

from sagacity.temporal.rollback import RollbackResult, rollback_id
from tests.approvals.conftest import StartOrder
from tests.approvals.test_console_operations import (  # noqa: F401 (fixtures)
    ORIGIN,
    owner_pool,
    sign_in,
    web,
)
from workflows.order.shop import Shop


async def test_an_operator_rolls_a_terminated_saga_back_from_its_page(
    web: httpx.AsyncClient,  # noqa: F811
    start_order: StartOrder,
    temporal_client: Client,
    shop: Shop,
) -> None:
    waiting = await start_order()
    await waiting.handle.terminate(reason="test")
    page_url = f"/console/sagas/{waiting.saga_id}"
    action = f"{page_url}/rollback"

    await sign_in(web, "tok-bob")
    page = await web.get(page_url)
    assert 'data-testid="left-live"' in page.text
    assert "reserve_inventory (call seq 1) took effect" in page.text
    assert "create_order (call seq 3) took effect" in page.text
    assert 'data-testid="rollback-form"' not in page.text  # bob may not operate
    bob = await web.post(
        action, data={"csrf": await sign_in(web, "tok-bob"), "reason": "x"},
        headers={"Origin": ORIGIN},
    )  # fmt: skip
    assert bob.status_code == 403

    csrf = await sign_in(web, "tok-olivia")
    page = await web.get(page_url)
    assert 'data-testid="rollback-form"' in page.text
    form = {"csrf": csrf, "reason": "stuck order"}
    assert (await web.post(action, data={**form, "csrf": ""})).status_code == 403
    elsewhere = await web.post(action, data=form, headers={"Origin": "https://evil.example"})
    assert elsewhere.status_code == 403

    done = await web.post(action, data=form, headers={"Origin": ORIGIN})
    assert done.status_code == 303, done.text
    handle = temporal_client.get_workflow_handle(
        rollback_id(waiting.saga_id), result_type=RollbackResult
    )
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.ok and len(result.compensated) == 2
    snap = await shop.snapshot()
    assert (snap.held_reservations, snap.placed_orders) == (0, 0)
    page = await web.get(done.headers["location"])
    assert "The rollback started" in page.text
    assert 'data-testid="left-live"' not in page.text
