"""The Order example with ``send_quote`` (COMPENSATABLE: corrected by an email) as a worker app."""

from workflows.order import quotes, tools
from workflows.order.lifespan import lifespan
from workflows.order.workflows import PlaceOrder

TOOLS = [*tools.TOOLS, *quotes.TOOLS]
WORKFLOWS = [PlaceOrder]

__all__ = ["TOOLS", "WORKFLOWS", "lifespan"]
