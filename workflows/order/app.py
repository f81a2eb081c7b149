"""The Order example as a worker app: its tools, workflows and set-up."""

from workflows.order.lifespan import lifespan
from workflows.order.tools import TOOLS
from workflows.order.workflows import PlaceOrder

WORKFLOWS = [PlaceOrder]

__all__ = ["TOOLS", "WORKFLOWS", "lifespan"]
