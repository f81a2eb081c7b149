"""The agent Order example as a worker app: the Order tools, the agent saga workflow, the shop."""

from sagacity.agents import AgentSagaWorkflow
from workflows.agent_order.script import SCRIPTS
from workflows.order.lifespan import lifespan
from workflows.order.tools import TOOLS

WORKFLOWS = [AgentSagaWorkflow]

__all__ = ["SCRIPTS", "TOOLS", "WORKFLOWS", "lifespan"]
