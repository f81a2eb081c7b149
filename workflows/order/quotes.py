"""A COMPENSATABLE tool for the Order example: a price quote, withdrawn by a correction email.

An email cannot be unsent, but a quote that should not stand can be corrected: ``send_quote``
puts the quote in the shop's outbox, and its compensation, ``send_correction``, puts a
correction after it ("disregard quote …") and returns the correction's id. The quote stays in
the outbox; ``saga status``, ``certify``, ``reconcile``, the console and an agent's summary say
it was *corrected, not restored*, with what the correction returned.

Not in the Order app's ``TOOLS`` (its demo and agent keep their three tools): serve it with
``sagacity worker --app workflows.order.quote_app``, the Order app plus this tool.
"""

from __future__ import annotations

from typing import Any

from sagacity import (
    CompensableTool,
    CompensationContext,
    Found,
    ProbeContext,
    Reversibility,
    compensable,
    current_call,
)
from workflows.order.shop import current
from workflows.order.tools import effect_id

__all__ = ["TOOLS", "send_quote"]


@compensable(by="send_correction", reversibility=Reversibility.COMPENSATABLE)
async def send_quote(product_id: str, quantity: int, price_cents: int) -> dict[str, Any]:
    """Email the customer a price quote: once read it cannot be unread, only corrected."""
    call = current_call()
    quote_id = effect_id("q", call.saga_id, call.seq)
    body = f"Quote {quote_id}: {quantity} x {product_id} for {price_cents / 100:.2f}."
    return {
        "quote_id": quote_id,
        "message_id": await current().send_once(quote_id, "quote", body, call.saga_id),
    }


async def send_correction(ctx: CompensationContext) -> dict[str, Any]:
    """Withdraw the quote with a correction email; the correction's id is what the journal,
    ``saga status`` and the agent are told."""
    quote_id = effect_id("q", ctx.saga_id, ctx.seq)  # the same, whether the call failed or not
    body = f"Please disregard quote {quote_id}: the order it was for did not go through."
    message_id = await current().send_once(quote_id, "correction", body, ctx.saga_id)
    return {"correction_message_id": message_id, "quote_id": quote_id}


@send_quote.probe
async def quote_sent(ctx: ProbeContext) -> Found | bool:
    """The quote exists once it is in the outbox (a correction follows it, never removes it)."""
    quote_id = effect_id("q", ctx.saga_id, ctx.seq)
    message_id = await current().sent(quote_id, "quote", ctx.saga_id)
    return False if message_id is None else Found({"quote_id": quote_id, "message_id": message_id})


TOOLS: list[CompensableTool[..., Any]] = [send_quote]
