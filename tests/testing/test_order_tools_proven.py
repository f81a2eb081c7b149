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


@pytest.mark.parametrize("tool", ["reserve_inventory", "create_order"])
async def test_the_reversible_tools_are_proven_in_every_case(
    tool: str, sagacity_app: RunningApp, sagacity_prover: RollbackProver
) -> None:
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool(tool), args={"product_id": "p-1", "quantity": 2}, probe=shop
    )

    report.assert_ok()
    proven = [v.case for v in report.verdicts if v.ok]
    assert proven == [c for c in RollbackCase if c is not RollbackCase.IRREVERSIBLE_WAITS]


async def test_send_confirmation_waits_for_approval(
    sagacity_app: RunningApp, sagacity_prover: RollbackProver
) -> None:
    report = await sagacity_prover.prove_rollback(
        sagacity_app.tool("send_confirmation"), args={"order_id": "ord-1"}, probe=shop
    )

    assert report.verdict(RollbackCase.IRREVERSIBLE_WAITS).ok
    report.assert_ok()
