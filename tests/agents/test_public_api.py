"""The agents module's public names, pinned: removing or renaming one is a breaking change."""

from __future__ import annotations

import sagacity.agents


def test_public_names() -> None:
    assert sorted(sagacity.agents.__all__) == [
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
    for name in sagacity.agents.__all__:
        assert getattr(sagacity.agents, name) is not None
