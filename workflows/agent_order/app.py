"""The agent Order example as a worker app: the Order tools, the agent saga workflow, the shop."""

from typing import Any, cast

from temporalio.plugin import SimplePlugin

from sagacity.agents import AgentSagaWorkflow, model_provider_from_settings, openai_agents_plugins
from sagacity.settings import Settings
from sagacity.tools import CompensableTool
from workflows.agent_order.script import SCRIPTS
from workflows.order import tools
from workflows.order.lifespan import lifespan

# the Order tools, typed (their own list is inferred as list[object])
TOOLS = cast(list[CompensableTool[..., Any]], tools.TOOLS)

WORKFLOWS = [AgentSagaWorkflow]

__all__ = ["SCRIPTS", "TOOLS", "WORKFLOWS", "lifespan", "plugins"]


def plugins(settings: Settings) -> list[SimplePlugin]:
    """What a worker adds after Sagacity's plugin: the Agents SDK plugin and its model."""
    return openai_agents_plugins(model_provider_from_settings(settings, scripts=SCRIPTS))
