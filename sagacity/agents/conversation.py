"""The agent's conversation by reference: Temporal's history holds what is new, Postgres the rest.

Temporal's Agents SDK integration sends the whole conversation with every model call, so a
conversation's history grows with the square of its length and one call's input meets the 2 MB
payload limit. Here the workflow sends only the items added since its last call, with the hash of
the stored version they extend (:mod:`sagacity.store.conversations`); the activity stores them,
loads the whole conversation, checks every version's hash, and calls the model. Continue-as-new
hands over that hash and the few items after it, and the next run loads the conversation once.

Built on the integration's model stub and model activity (private to ``temporalio.openai_agents``,
whose version pyproject.toml pins): their inputs, tools and retries stay exactly the SDK's.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from agents import (
    AgentOutputSchemaBase,
    Handoff,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    Tool,
    TResponseInputItem,
)
from agents.run import get_default_agent_runner
from openai.types.responses.response_prompt_param import ResponsePromptParam
from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError
from temporalio.openai_agents._invoke_model_activity import ActivityModelInput, ModelActivity
from temporalio.openai_agents._openai_runner import TemporalOpenAIRunner
from temporalio.openai_agents._temporal_model_stub import _TemporalModelStub

from sagacity.errors import ConversationTampered, PayloadTooLarge
from sagacity.store.conversations import ConversationStore
from sagacity.temporal import limits
from sagacity.temporal.activities import journal_among

__all__ = [
    "CONVERSATION_PATCH",
    "ConversationActivities",
    "ConversationLoad",
    "ModelCall",
    "ModelReply",
    "StoredConversationModel",
    "conversation_activities",
]

#: Runs that reached a model call before this patch send the whole conversation by value.
CONVERSATION_PATCH = "sagacity-conversation-by-ref"
INVOKE_MODEL = "sagacity.agents.invoke_model"
LOAD_CONVERSATION = "sagacity.agents.load_conversation"


@dataclass
class ModelCall:
    """One model call: the SDK's input without its conversation, and what the conversation gained."""

    saga_id: str
    #: the stored version ``added`` extends; None starts the conversation over
    base: str | None
    added: list[Any]
    model_input: ActivityModelInput


@dataclass
class ModelReply:
    """The model's response, and the stored version of the conversation it answered."""

    response: ModelResponse
    version: str


@dataclass
class ConversationLoad:
    saga_id: str
    version: str


class ConversationActivities:
    """Stores conversation versions and calls the model with the whole conversation."""

    def __init__(self, store: ConversationStore, model: ModelActivity) -> None:
        self.store = store
        self.model = model

    @activity.defn(name=INVOKE_MODEL)
    async def invoke_model(self, call: ModelCall) -> ModelReply:
        try:
            version = await self.store.put(call.saga_id, call.base, call.added)
            items = await self.store.get(call.saga_id, version.hash)
        except ConversationTampered as exc:
            raise _refused(exc) from exc
        model_input: ActivityModelInput = {**call.model_input, "input": items}
        response = await self.model.invoke_model_activity(model_input)
        reply = ModelReply(response=response, version=version.hash)
        try:
            # an answer over Temporal's limits is refused by the worker and retried for nothing
            limits.check(
                "the model's reply", activity.payload_converter().to_payload(reply).ByteSize()
            )
        except PayloadTooLarge as exc:
            raise ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True) from None
        return reply

    @activity.defn(name=LOAD_CONVERSATION)
    async def load_conversation(self, load: ConversationLoad) -> list[Any]:
        try:
            return await self.store.get(load.saga_id, load.version)
        except ConversationTampered as exc:
            raise _refused(exc) from exc


def _refused(exc: ConversationTampered) -> ApplicationError:
    # no retry makes a changed conversation whole again: the agent run fails and compensates
    return ApplicationError(str(exc), type=type(exc).__name__, non_retryable=True)


def conversation_activities(
    model_provider: ModelProvider,
) -> Callable[[Sequence[Callable[..., Any]] | None], Sequence[Callable[..., Any]]]:
    """A plugin's ``activities`` hook adding the conversation activities to a saga worker.

    Conversations live in the journal's database: the pool is the one Sagacity's activities on
    the same worker use (their plugin comes first). A worker without them runs no agent saga.
    """

    def add(existing: Sequence[Callable[..., Any]] | None) -> Sequence[Callable[..., Any]]:
        existing = list(existing or [])
        journal = journal_among(existing)
        if journal is None:
            return existing
        acts = ConversationActivities(
            ConversationStore(journal.pool), ModelActivity(model_provider)
        )
        return [*existing, acts.invoke_model, acts.load_conversation]

    return add


class StoredConversationModel(_TemporalModelStub):
    """The workflow's model: each call sends only the items added since the stored version."""

    def __init__(self, model_name: str | None, *, saga_id: str) -> None:
        runner = get_default_agent_runner()
        if not isinstance(runner, TemporalOpenAIRunner):
            raise TypeError("agent sagas run on workers with Temporal's Agents SDK plugin")
        super().__init__(model_name, model_params=runner.model_params, agent=None)
        self.saga_id = saga_id
        #: the stored version, and a copy of the items it holds (the SDK may change its own)
        self.version: str | None = None
        self.stored: list[Any] = []

    def resume(self, version: str, items: list[Any]) -> None:
        """Go on from a stored version whose items the workflow has loaded."""
        self.version, self.stored = version, copy.deepcopy(items)

    def hand_over(self, history: list[Any]) -> tuple[str | None, list[Any]]:
        """For continue-as-new: the stored version ``history`` extends, and the items after it."""
        if self.version is not None and self._extends(history):
            return self.version, history[len(self.stored) :]
        return None, history

    def _extends(self, items: list[Any]) -> bool:
        return items[: len(self.stored)] == self.stored

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        *,
        previous_response_id: str | None,
        conversation_id: str | None,
        prompt: ResponsePromptParam | None,
    ) -> ModelResponse:
        params = self.model_params
        if (
            isinstance(input, str)
            or params.use_local_activity
            or not workflow.patched(CONVERSATION_PATCH)
        ):
            return await super().get_response(
                system_instructions,
                input,
                model_settings,
                tools,
                output_schema,
                handoffs,
                tracing,
                previous_response_id=previous_response_id,
                conversation_id=conversation_id,
                prompt=prompt,
            )
        model_input, summary = self._build_activity_input(
            system_instructions=system_instructions,
            input=[],
            model_settings=model_settings,
            tools=tools,
            output_schema=output_schema,
            handoffs=handoffs,
            tracing=tracing,
            previous_response_id=previous_response_id,
            conversation_id=conversation_id,
            prompt=prompt,
        )
        items = list(input)
        extends = self.version is not None and self._extends(items)
        reply: ModelReply = await workflow.execute_activity(
            INVOKE_MODEL,
            ModelCall(
                saga_id=self.saga_id,
                base=self.version if extends else None,
                added=items[len(self.stored) :] if extends else items,
                model_input=model_input,
            ),
            result_type=ModelReply,
            summary=summary,
            task_queue=params.task_queue,
            schedule_to_close_timeout=params.schedule_to_close_timeout,
            schedule_to_start_timeout=params.schedule_to_start_timeout,
            start_to_close_timeout=params.start_to_close_timeout,
            heartbeat_timeout=params.heartbeat_timeout,
            retry_policy=params.retry_policy,
            cancellation_type=params.cancellation_type,
            versioning_intent=params.versioning_intent,
            priority=params.priority,
        )
        self.version, self.stored = reply.version, copy.deepcopy(items)
        return reply.response


async def load_conversation(
    saga_id: str, version: str, model: StoredConversationModel
) -> list[Any]:
    """In the workflow: the stored conversation up to ``version``, and ``model`` set to go on."""
    params = model.model_params
    items: list[Any] = await workflow.execute_activity(
        LOAD_CONVERSATION,
        ConversationLoad(saga_id=saga_id, version=version),
        result_type=list[Any],
        schedule_to_close_timeout=params.schedule_to_close_timeout,
        start_to_close_timeout=params.start_to_close_timeout,
        retry_policy=params.retry_policy,
    )
    model.resume(version, items)
    return items
