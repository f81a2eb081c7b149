"""The Order example proves its own tools with the plugin: its app served as a user's would
be, each tool proven against the shop's tables."""

from __future__ import annotations

import pytest

from sagacity.testing import RollbackCase, RollbackProver, RunningApp
from workflows.order.shop import Snapshot, current


@pytest.fixture(scope="session")
def sagacity_app_modules() -> list[str]:
    return ["workflows.order.app"]


async def shop() -> Snapshot:
    """The probe: stock, held reservations, placed orders and mail sent, as a person checks."""
    return await current().snapshot()


async def test_reserve_inventory_is_proven(
    sagacity_app: RunningApp, sagacity_prover: RollbackProver
) -> None:
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool("reserve_inventory"),
        args={"product_id": "p-1", "quantity": 2},
        probe=shop,
    )

    report.assert_ok()
    assert report.verdict(RollbackCase.WORKER_KILLED_AFTER_EFFECT).ok


async def test_create_order_is_proven(
    sagacity_app: RunningApp, sagacity_prover: RollbackProver
) -> None:
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool("create_order"),
        args={"product_id": "p-1", "quantity": 2},
        probe=shop,
    )

    report.assert_ok()


async def test_send_confirmation_waits_for_approval(
    sagacity_app: RunningApp, sagacity_prover: RollbackProver
) -> None:
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool("send_confirmation"), args={"order_id": "ord-1"}, probe=shop
    )

    assert report.verdict(RollbackCase.IRREVERSIBLE_WAITS).ok
    report.assert_ok()
