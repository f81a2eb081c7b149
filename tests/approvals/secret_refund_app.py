"""A rule-gated refund whose call carries a secret the default redaction rules hide
(``api_token``): served by ``sagacity worker --app`` for the redacted-edit tests."""

from __future__ import annotations

from typing import Any

from sagacity import CompensableTool, CompensationContext, compensable
from tests.approvals.refund_app import LARGE_REFUND


@compensable(by="claw_back", needs_approval=LARGE_REFUND)
def refund(order_id: str, amount: int, api_token: str) -> str:
    """Refund the customer through the payment provider's API."""
    return f"refund-{order_id}-{amount}"


def claw_back(ctx: CompensationContext) -> None:
    """Take the refund back."""


TOOLS: list[CompensableTool[..., Any]] = [refund]
