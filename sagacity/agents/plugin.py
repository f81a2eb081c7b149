"""The plugins a worker needs to run agent sagas: Sagacity's and Temporal's Agents SDK plugin.

Order matters, and so does one thing between them:

* :class:`~sagacity.temporal.plugin.SagacityPlugin` comes first. It sets a sandbox runner of its
  own (passing ``sagacity`` through) without looking at an earlier one, so anything before it
  would be lost; the Agents SDK plugin, after it, adds ``agents`` and ``openai`` to that runner.
* Sagacity's plugin sets Temporal's pydantic data converter, and the Agents SDK plugin refuses
  any converter but the default one, which it replaces with its own ``OpenAIPayloadConverter``
  (``ValueError`` at client creation otherwise; its check for "already mine" does not see through
  the wrapper temporalio 1.35 puts around payload converters, so only the default gets through).
  Its converter is pydantic JSON too (leaving unset fields out, lenient with OpenAI payloads), so
  Sagacity's models round-trip through it unchanged: a small plugin between the two hands the
  Agents SDK plugin a default converter (codec and failure converter kept) for it to upgrade,
  so the model's activities' payloads are encrypted like the rest.
  Clients that only start, signal and query sagas may keep Sagacity's converter: both write the
  same JSON payloads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from datetime import timedelta
from typing import Any

from agents import ModelProvider
from temporalio.client import Client
from temporalio.common import RetryPolicy
from temporalio.converter import DataConverter, DefaultPayloadConverter
from temporalio.openai_agents import ModelActivityParameters, OpenAIAgentsPlugin
from temporalio.plugin import SimplePlugin

from sagacity.agents.conversation import conversation_activities
from sagacity.agents.workflow import AgentSagaWorkflow
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Keyring
from sagacity.evidence.redaction import Redactor
from sagacity.store.approvals import ApprovalStore
from sagacity.store.journal import JournalStore
from sagacity.temporal.plugin import CODEC_FROM_SETTINGS, CodecChoice, SagacityPlugin
from sagacity.tools import CompensableTool

__all__ = ["agent_plugins", "openai_agents_plugins", "with_plugins"]


def _for_agents_plugin(existing: DataConverter | None) -> DataConverter:
    converter = existing or DataConverter()
    return dataclasses.replace(converter, payload_converter_class=DefaultPayloadConverter)


def openai_agents_plugins(
    model_provider: ModelProvider,
    *,
    model_timeout: timedelta = timedelta(seconds=120),
    model_attempts: int = 5,
) -> list[SimplePlugin]:
    """What goes after a worker's :class:`SagacityPlugin` so it can run agents.

    ``model_attempts`` bounds the retries of one model call; when they run out the agent run
    fails and the saga compensates, rather than waiting forever on a model that is down. Model
    calls read the conversation from the journal's database, as :class:`SagacityPlugin` sees it.
    """
    return [
        SimplePlugin(
            "sagacity.agents.converter",
            data_converter=_for_agents_plugin,
            activities=conversation_activities(model_provider),
        ),
        OpenAIAgentsPlugin(
            model_params=ModelActivityParameters(
                start_to_close_timeout=model_timeout,
                retry_policy=RetryPolicy(maximum_attempts=model_attempts),
            ),
            model_provider=model_provider,
        ),
    ]


def agent_plugins(
    *,
    journal: JournalStore,
    approvals: ApprovalStore,
    tools: Iterable[CompensableTool[..., Any]],
    model_provider: ModelProvider,
    workflows: Sequence[type] = (),
    checkpoints: CheckpointWriter | None = None,
    redactor: Redactor | None = None,
    model_timeout: timedelta = timedelta(seconds=120),
    model_attempts: int = 5,
    codec: CodecChoice = CODEC_FROM_SETTINGS,
    keyring: Keyring | None = None,
) -> list[SimplePlugin]:
    """All plugins of a client whose workers run agent sagas (and the plain saga workflow).

    ``checkpoints`` signs the chain head each activity leaves and ``redactor`` keeps secrets
    out of what is written, as a plain worker's do; ``codec`` encrypts every payload, the model's
    conversation included, as :class:`SagacityPlugin`'s does; with ``keyring`` every decision
    must be signed by a key in it.
    """
    others = [w for w in workflows if w is not AgentSagaWorkflow]
    return [
        SagacityPlugin(
            journal=journal,
            approvals=approvals,
            tools=tools,
            workflows=[AgentSagaWorkflow, *others],
            redactor=redactor,
            checkpoints=checkpoints,
            codec=codec,
            keyring=keyring,
        ),
        *openai_agents_plugins(
            model_provider, model_timeout=model_timeout, model_attempts=model_attempts
        ),
    ]


def with_plugins(client: Client, plugins: Sequence[SimplePlugin]) -> Client:
    """A client on the same connection as ``client``, configured by ``plugins`` instead."""
    config = client.config()
    config["plugins"] = list(plugins)
    return Client(**config)
