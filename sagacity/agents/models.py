"""Which model an agent saga talks to: a scripted one (tests, the demo) or a real OpenAI endpoint.

The scripted model drives the real Agents SDK loop with no API key. It keeps no state between
calls: the reply is a function of the conversation it is given, so a worker that starts after a
crash, replaying or retrying a model call, gives the same answer. The position in the script is
read off the conversation:

* the *turn* is the number of user messages so far, minus one (a multi-turn saga's follow-up
  messages and a compensation summary are user messages too);
* the *step* within the turn is found by counting the tool outputs after the last user message:
  a step that asks for two tools at once (a parallel turn) accounts for two outputs.

A step's arguments and texts may be functions of the :class:`Conversation`, so a script can pass
an earlier tool's result on (``create_order`` gets the reservation id ``reserve_inventory``
returned), the way a model reads it off the conversation.

:func:`model_provider_from_settings` picks the model for a worker: the scripted provider unless
``OPENAI_API_KEY`` is set, then OpenAI (or any OpenAI-compatible server at ``OPENAI_BASE_URL``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agents import (
    AgentOutputSchemaBase,
    Handoff,
    Model,
    ModelProvider,
    ModelResponse,
    ModelSettings,
    ModelTracing,
    OpenAIProvider,
    Tool,
    TResponseInputItem,
    Usage,
)
from agents.items import TResponseOutputItem, TResponseStreamEvent
from agents.testing import assistant_message, function_call
from openai import AsyncOpenAI
from temporalio.exceptions import ApplicationError

from sagacity.settings import Settings

__all__ = [
    "Call",
    "Conversation",
    "Say",
    "Script",
    "ScriptedModel",
    "ScriptedModelProvider",
    "model_provider_from_settings",
    "uses_scripted_model",
]


@dataclass(frozen=True)
class ToolOutput:
    """One tool result as the model saw it: JSON-decoded, or the text of an error message."""

    tool: str
    output: Any
    #: the output was not JSON: Sagacity's agent tools answer failures in plain text
    failed: bool = False


@dataclass(frozen=True)
class Conversation:
    """What a scripted step may look at: the user's last message and this turn's tool outputs."""

    turn: int
    user_message: str
    outputs: list[ToolOutput]

    def result_of(self, tool: str) -> Any:
        """The latest output of ``tool`` in this turn (its JSON result, or its error text)."""
        for item in reversed(self.outputs):
            if item.tool == tool:
                return item.output
        raise LookupError(f"no output of {tool!r} in this turn yet")

    @property
    def last(self) -> ToolOutput | None:
        return self.outputs[-1] if self.outputs else None


Args = Mapping[str, Any] | Callable[[Conversation], Mapping[str, Any]]
Text = str | Callable[[Conversation], str]


@dataclass(frozen=True)
class Call:
    """Ask for one tool call; ``args`` may be computed from the conversation."""

    tool: str
    args: Args = field(default_factory=dict)


@dataclass(frozen=True)
class Say:
    """Answer in text: the turn's final output."""

    text: Text


Step = Call | Sequence[Call] | Say
"""One model reply: a tool call, several at once (a parallel turn), or the final answer."""


@dataclass(frozen=True)
class Script:
    """A model's replies, turn by turn; each turn ends with a :class:`Say`.

    ``on_failure``: when the latest tool output is an error, say this instead of the next step
    and end the turn (a model that gives up); None carries on with the script (a model that
    retries, or ignores the error).
    """

    turns: Sequence[Sequence[Step]]
    on_failure: Text | None = None

    def __post_init__(self) -> None:
        for index, turn in enumerate(self.turns):
            if not turn or not isinstance(turn[-1], Say):
                raise ValueError(f"turn {index} of the script must end with Say(...)")

    def reply(self, conversation: Conversation) -> list[TResponseOutputItem]:
        """The output items for this point of the conversation."""
        if conversation.turn >= len(self.turns):
            raise LookupError(
                f"the script has {len(self.turns)} turn(s); the conversation is in turn "
                f"{conversation.turn + 1}"
            )
        seen = len(conversation.outputs)
        for index, step in enumerate(self.turns[conversation.turn]):
            calls = _calls(step)
            if seen == 0 or not calls:
                last = conversation.last
                if last is not None and last.failed and self.on_failure is not None:
                    step = Say(self.on_failure)
                return self._render(step, conversation, index)
            seen -= len(calls)
        raise LookupError("the conversation has more tool outputs than the script has calls")

    @staticmethod
    def _render(step: Step, conversation: Conversation, index: int) -> list[TResponseOutputItem]:
        if isinstance(step, Say):
            text = step.text(conversation) if callable(step.text) else step.text
            return [assistant_message(text, item_id=f"msg_{conversation.turn}_{index}")]
        items: list[TResponseOutputItem] = []
        for k, call in enumerate(_calls(step)):
            args = call.args(conversation) if callable(call.args) else call.args
            call_id = f"call_{conversation.turn}_{index}_{k}"
            items.append(function_call(call.tool, dict(args), call_id=call_id))
        return items


def _calls(step: Step) -> list[Call]:
    if isinstance(step, Say):
        return []
    if isinstance(step, Call):
        return [step]
    return list(step)


def read_conversation(input: str | list[TResponseInputItem]) -> Conversation:
    """Where a conversation stands: turn number, last user message, this turn's tool outputs."""
    if isinstance(input, str):
        return Conversation(turn=0, user_message=input, outputs=[])
    names: dict[str, str] = {}
    turn, message = -1, ""
    outputs: list[ToolOutput] = []
    for raw in input:
        item: Mapping[str, Any] = raw
        kind = item.get("type")
        if item.get("role") == "user" and kind in (None, "message"):
            turn, message, outputs = turn + 1, _text(item.get("content")), []
        elif kind == "function_call":
            names[str(item.get("call_id"))] = str(item.get("name"))
        elif kind == "function_call_output":
            tool = names.get(str(item.get("call_id")), "?")
            outputs.append(_decode(tool, _text(item.get("output"))))
    return Conversation(turn=max(turn, 0), user_message=message, outputs=outputs)


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
    return "" if content is None else str(content)


def _decode(tool: str, text: str) -> ToolOutput:
    try:
        return ToolOutput(tool, json.loads(text))
    except ValueError:
        return ToolOutput(tool, text, failed=True)


class ScriptedModel(Model):
    """A model that answers from a :class:`Script`, deterministically and without state."""

    def __init__(self, script: Script) -> None:
        self.script = script

    async def get_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> ModelResponse:
        try:
            output = self.script.reply(read_conversation(input))
        except (LookupError, KeyError, TypeError, ValueError) as exc:
            # a script that does not fit the conversation will not fit it on a retry either
            raise ApplicationError(
                f"the script cannot answer: {type(exc).__name__}: {exc}",
                type="ScriptMismatch",
                non_retryable=True,
            ) from exc
        return ModelResponse(output=output, usage=Usage(), response_id=None)

    def stream_response(
        self,
        system_instructions: str | None,
        input: str | list[TResponseInputItem],
        model_settings: ModelSettings,
        tools: list[Tool],
        output_schema: AgentOutputSchemaBase | None,
        handoffs: list[Handoff],
        tracing: ModelTracing,
        **kwargs: Any,
    ) -> AsyncIterator[TResponseStreamEvent]:
        raise NotImplementedError("the scripted model does not stream")


class ScriptedModelProvider(ModelProvider):
    """Scripts by name; the agent's model name picks one, no name picks ``default``."""

    def __init__(self, scripts: Mapping[str, Script], *, default: str | None = None) -> None:
        if not scripts:
            raise ValueError("a scripted model provider needs at least one script")
        self.scripts = dict(scripts)
        self.default = default or next(iter(self.scripts))
        if self.default not in self.scripts:
            raise ValueError(f"default script {self.default!r} is not among the scripts")

    def get_model(self, model_name: str | None) -> Model:
        name = model_name or self.default
        if name not in self.scripts:
            known = ", ".join(sorted(self.scripts))
            raise LookupError(f"no script named {name!r} (scripts: {known})")
        return ScriptedModel(self.scripts[name])


class _DefaultModel(ModelProvider):
    """A provider whose unnamed model is ``default`` rather than the SDK's own default."""

    def __init__(self, inner: ModelProvider, default: str) -> None:
        self.inner = inner
        self.default = default

    def get_model(self, model_name: str | None) -> Model:
        return self.inner.get_model(model_name or self.default)

    async def aclose(self) -> None:
        await self.inner.aclose()


def uses_scripted_model(settings: Settings) -> bool:
    """True when no OpenAI API key is configured, so agents talk to the scripted model."""
    return settings.openai_api_key is None


def model_provider_from_settings(
    settings: Settings, *, scripts: Mapping[str, Script]
) -> ModelProvider:
    """The scripted provider (over ``scripts``) without an API key; OpenAI with one.

    With ``OPENAI_BASE_URL`` set, any OpenAI-compatible server is used; such servers mostly
    speak Chat Completions, so that API is used there unless ``SAGACITY_MODEL_API`` says
    ``responses``. The model is ``SAGACITY_MODEL`` unless the agent names one.
    """
    if uses_scripted_model(settings):
        return ScriptedModelProvider(scripts)
    assert settings.openai_api_key is not None
    api = settings.model_api
    if api == "auto":
        api = "chat_completions" if settings.openai_base_url else "responses"
    # retries belong to the model activity's retry policy, not to the HTTP client
    client = AsyncOpenAI(
        api_key=settings.openai_api_key.get_secret_value(),
        base_url=settings.openai_base_url,
        max_retries=0,
    )
    provider = OpenAIProvider(openai_client=client, use_responses=api == "responses")
    return _DefaultModel(provider, settings.model)
