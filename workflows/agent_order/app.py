"""The agent Order example as a worker app: the Order tools, the agent saga workflow, the shop."""

from temporalio.plugin import SimplePlugin

from sagacity.agents import AgentSagaWorkflow, model_provider_from_settings, openai_agents_plugins
from sagacity.settings import Settings
from workflows.agent_order.script import SCRIPTS
from workflows.order.lifespan import lifespan
from workflows.order.tools import TOOLS

WORKFLOWS = [AgentSagaWorkflow]

__all__ = ["SCRIPTS", "TOOLS", "WORKFLOWS", "lifespan", "plugins"]


def plugins(settings: Settings) -> list[SimplePlugin]:
    """What a worker adds after Sagacity's plugin: the Agents SDK plugin and its model."""
    return openai_agents_plugins(model_provider_from_settings(settings, scripts=SCRIPTS))
