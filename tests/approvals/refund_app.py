"""The refund app the approval-rule tests serve: a REVERSIBLE refund that waits for a human
when it returns more than 1,000, and a hold on funds before it (``sagacity worker --app``)."""

from __future__ import annotations

from typing import Any

from sagacity import ApprovalRule, CompensableTool, CompensationContext, compensable

LARGE_REFUND = ApprovalRule(name="large refund", field="amount", op=">", value=1000)


@compensable(by="release_funds")
def hold_funds(order_id: str, amount: int) -> str:
    """Hold the order's funds."""
    return f"hold-{order_id}-{amount}"


def release_funds(ctx: CompensationContext) -> None:
    """Release the hold."""


@compensable(by="claw_back", needs_approval=LARGE_REFUND)
def refund(order_id: str, amount: int) -> str:
    """Refund the customer."""
    return f"refund-{order_id}-{amount}"


def claw_back(ctx: CompensationContext) -> None:
    """Take the refund back."""


TOOLS: list[CompensableTool[..., Any]] = [hold_funds, refund]
