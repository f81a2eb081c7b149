"""The app the co-approval tests serve: a hold on funds, then an IRREVERSIBLE wire that needs
two approvals of the keyring's ``finance`` group, not the saga's starter's
(``sagacity worker --app``)."""

from __future__ import annotations

from typing import Any

from sagacity import (
    ApprovalPolicy,
    CompensableTool,
    CompensationContext,
    Reversibility,
    compensable,
)

FINANCE = ApprovalPolicy(required=2, group="finance", starter_may_approve=False)


@compensable(by="release_funds")
def hold_funds(order_id: str, amount: int) -> str:
    """Hold the order's funds."""
    return f"hold-{order_id}-{amount}"


def release_funds(ctx: CompensationContext) -> None:
    """Release the hold."""


@compensable(reversibility=Reversibility.IRREVERSIBLE, approval_policy=FINANCE)
def wire_funds(order_id: str, amount: int) -> str:
    """Wire the funds out."""
    return f"wired-{order_id}-{amount}"


TOOLS: list[CompensableTool[..., Any]] = [hold_funds, wire_funds]
