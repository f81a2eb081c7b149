"""What the scripted model does in the Order example, standing in for an LLM with no API key.

Asked to place an order, it reserves the stock, creates the order with the reservation id it got
back, sends the confirmation for that order id, and reports. Asked after a compensation, it tells
the user what was undone. Every argument comes from the conversation, as an LLM's would.
"""

from __future__ import annotations

import re
from typing import Any

from sagacity.agents import Call, Conversation, Say, Script

PROMPT = "Place an order for 2 units of product p-1"


def _request(c: Conversation) -> dict[str, Any]:
    """Product and quantity as the user asked for them (p-1 and 1 when unsaid)."""
    product = re.search(r"product\s+([\w-]+)", c.user_message)
    quantity = re.search(r"(\d+)\s+units?", c.user_message)
    return {
        "product_id": product.group(1) if product else "p-1",
        "quantity": int(quantity.group(1)) if quantity else 1,
    }


def _order(c: Conversation) -> dict[str, Any]:
    return {**_request(c), "reservation_id": c.result_of("reserve_inventory")["reservation_id"]}


def _confirm(c: Conversation) -> dict[str, Any]:
    return {"order_id": c.result_of("create_order")["order_id"]}


def _done(c: Conversation) -> str:
    order = c.result_of("create_order")
    mail = c.result_of("send_confirmation")
    return (
        f"Order {order['order_id']} is placed: {order['quantity']} x {order['product_id']}, "
        f"stock reserved, and the confirmation went out (message {mail['message_id']})."
    )


def _gave_up(c: Conversation) -> str:
    assert c.last is not None
    return f"I could not finish the order: {c.last.tool} did not go through ({c.last.output})"


def _after_compensation(c: Conversation) -> str:
    undone = re.search(r"Undone, newest first: (.*)\.", c.user_message)
    what = f" Undone: {undone.group(1)}." if undone else ""
    return (
        "Sorry, the order could not be completed, so it was rolled back: nothing is reserved "
        f"or ordered for you now.{what}"
    )


ORDER = Script(
    turns=[
        [
            Call("reserve_inventory", _request),
            Call("create_order", _order),
            Call("send_confirmation", _confirm),
            Say(_done),
        ],
        [Say(_after_compensation)],
    ],
    on_failure=_gave_up,
)

SCRIPTS = {"order": ORDER}
