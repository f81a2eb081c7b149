"""OpenAI Agents SDK agents whose tool calls are Sagacity saga steps, inside Temporal workflows.

* :class:`AgentSagaWorkflow` (``sagacity.AgentSaga``): start it with an :class:`AgentSagaRequest`;
  it returns an :class:`AgentSagaResult`.
* :func:`saga_function_tools`: the worker's tools as function tools for your own agent workflows.
* :func:`compensable_function_tool`: an existing ``FunctionTool`` made a saga tool, with its undo.
* :func:`agent_plugins`: what a worker needs (Sagacity's plugin and Temporal's Agents SDK plugin).
* :class:`Script`, :class:`ScriptedModelProvider`: a deterministic model, no API key needed;
  :func:`model_provider_from_settings` picks it, or OpenAI when ``OPENAI_API_KEY`` is set.
"""

from sagacity.agents.function_tools import compensable_function_tool
from sagacity.agents.models import (
    Call,
    Conversation,
    Say,
    Script,
    ScriptedModel,
    ScriptedModelProvider,
    model_provider_from_settings,
    uses_scripted_model,
)
from sagacity.agents.plugin import agent_plugins, openai_agents_plugins, with_plugins
from sagacity.agents.tools import AgentStep, function_tool_for, saga_function_tools
from sagacity.agents.workflow import (
    AGENT_WORKFLOW,
    AgentSagaRequest,
    AgentSagaResult,
    AgentSagaWorkflow,
    compensation_summary,
)

__all__ = [
    "AGENT_WORKFLOW",
    "AgentSagaRequest",
    "AgentSagaResult",
    "AgentSagaWorkflow",
    "AgentStep",
    "Call",
    "Conversation",
    "Say",
    "Script",
    "ScriptedModel",
    "ScriptedModelProvider",
    "agent_plugins",
    "compensable_function_tool",
    "compensation_summary",
    "function_tool_for",
    "model_provider_from_settings",
    "openai_agents_plugins",
    "saga_function_tools",
    "uses_scripted_model",
    "with_plugins",
]
