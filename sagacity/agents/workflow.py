"""``sagacity.AgentSaga``: an OpenAI Agents SDK agent whose tool calls form one saga.

The workflow builds the agent from the worker's Sagacity tools (see :mod:`sagacity.agents.tools`)
and runs ``Runner.run`` inside ``saga.run``; the model calls are activities of Temporal's Agents
SDK plugin, the tool calls are the saga's journaled activities.

Failure policy (``AgentSagaRequest.policy``):

* ``compensate`` (default): any tool failure ends the saga compensated, even one the SDK turned
  into a message and the agent carried on from (the engine keeps ``saga.failures``).
* ``let_agent_recover``: a failure the agent carried on from is its to handle (retry, another
  route); FAILED is still journaled, and the saga completes unless the run itself fails.

Telling the agent: when the saga compensated, :func:`compensation_summary` says what failed and
what was undone. With ``feed_compensation_summary`` (default) the agent gets it as one more
message, tools withdrawn, and its answer becomes the final output, so what the user reads matches
what is left in the world; the summary is in the result either way.

Scope: one saga per agent run by default. With ``multi_turn``, one saga spans a conversation:
the workflow answers further user messages sent with the update ``turn`` (it returns the agent's
reply), and ends on the signal ``finish``; a failure in any turn is compensated at the end, per
the policy. A long conversation continues as new between turns (when no ``turn`` is waiting),
carrying the saga, the conversation (by reference: see :mod:`sagacity.agents.conversation`) and
the steps; so does a long compensation. The saga's own signals, update and query (``approve``, ``reject``, ``decide``,
``abort``, ``resolve``, ``status``) work as for any saga; ``steps`` lists the agent's tool calls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, Field
from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

with workflow.unsafe.imports_passed_through():
    from agents import Agent, AgentsException, Runner, RunResult, Tool, TResponseInputItem
    from temporalio.openai_agents import AgentsWorkflowError

    from sagacity.agents.conversation import StoredConversationModel, load_conversation
    from sagacity.agents.tools import AgentStep, saga_function_tools
    from sagacity.errors import AgentRunFailed, SagaAborted, SagacityError
    from sagacity.journal import to_json
    from sagacity.temporal.models import Effect, SagaCarry, SagaOptions, SagaResult, SagaState
    from sagacity.temporal.saga import Saga

__all__ = [
    "AGENT_WORKFLOW",
    "AgentResume",
    "AgentSagaRequest",
    "AgentSagaResult",
    "AgentSagaWorkflow",
    "compensation_summary",
]

AGENT_WORKFLOW = "sagacity.AgentSaga"

DEFAULT_INSTRUCTIONS = (
    "You carry out the user's request with the tools you are given, one step at a time, passing "
    "on the identifiers earlier tools returned. If a tool fails or is not approved, say so "
    "plainly; do not pretend it succeeded."
)

#: marks the message the runtime adds, so neither the model nor a reader takes it for the user
SUMMARY_PREFIX = "[Sagacity, the saga runtime, not the user]"

Policy = Literal["compensate", "let_agent_recover"]


class AgentSagaRequest(BaseModel):
    """What to ask the agent, with which tools and model, and how the saga treats failures."""

    prompt: str
    instructions: str = DEFAULT_INSTRUCTIONS
    #: tool names from the worker's catalog; None offers all of them
    tools: list[str] | None = None
    #: the model name (with the scripted provider: the script); None: the worker's default
    model: str | None = None
    options: SagaOptions = Field(default_factory=SagaOptions)
    policy: Policy = "compensate"
    feed_compensation_summary: bool = True
    multi_turn: bool = False
    #: model calls one agent run may make before it is stopped (and the saga compensates)
    max_turns: int = Field(default=10, ge=1)
    agent_name: str = "Sagacity agent"
    #: set by the workflow itself when it continues as new; None when a client starts it
    resume: AgentResume | None = None


class AgentResume(BaseModel):
    """A conversation handed to the next run by continue-as-new."""

    #: the items after ``conversation`` (all of them when it is None)
    history: list[Any]
    #: the stored conversation version ``history`` goes on from
    conversation: str | None = None
    outputs: list[str]
    steps: list[AgentStep]
    accepted: int
    carry: SagaCarry


class AgentSagaResult(BaseModel):
    """The agent's last word, the saga's outcome, and every tool call the agent made."""

    final_output: str | None
    saga: SagaResult
    steps: list[AgentStep]
    #: each turn's final output, as the agent gave it before any compensation
    turns: list[str] = Field(default_factory=list)
    compensation_summary: str | None = None


def compensation_summary(result: SagaResult) -> str | None:
    """What went wrong and what was undone, in words for the agent; None when it completed."""
    if result.status is SagaState.COMPLETED:
        return None
    lines = [f"{SUMMARY_PREFIX} The task did not complete and the saga was rolled back."]
    if result.error is not None:
        lines.append(f"Cause: {result.error.message}")
    restored = [e for e in result.compensated if e.undone_as == "restored"]
    corrected = [e for e in result.compensated if e.undone_as == "corrected"]
    if restored:
        undone = ", ".join(f"{e.tool_name} (call {e.call_seq})" for e in restored)
        lines.append(f"Undone, newest first: {undone}.")
    if corrected:
        lines.append(
            "Corrected, not undone (the original stays visible, a correction followed it): "
            + ", ".join(_corrected(e) for e in corrected)
            + "."
        )
    if not result.compensated:
        lines.append("Nothing had taken effect, so nothing needed undoing.")
    if result.live_effects:
        live = ", ".join(f"{e.tool_name} (call {e.call_seq})" for e in result.live_effects)
        lines.append(f"Still in effect, could not be undone: {live}.")
    if result.needs_attention:
        lines.append(f"A person must look at it: {result.needs_attention}")
    lines.append("Tell the user plainly what happened. Do not call tools.")
    return "\n".join(lines)


def _corrected(effect: Effect) -> str:
    """A corrected effect, and what its correction returned, in words for the agent."""
    said = f"{effect.tool_name} (call {effect.call_seq})"
    if effect.correction is None:
        return said
    return f"{said}, correction result {to_json(effect.correction)}"


def _agent(
    request: AgentSagaRequest, model: StoredConversationModel, tools: Sequence[Tool] = ()
) -> Agent[Any]:
    return Agent(
        name=request.agent_name,
        instructions=request.instructions,
        tools=list(tools),
        model=model,
    )


async def _run_agent(
    agent: Agent[Any], input: str | list[TResponseInputItem], max_turns: int
) -> RunResult:
    """``Runner.run``, with the SDK's errors turned into ones the saga compensates for."""
    try:
        return await Runner.run(agent, input, max_turns=max_turns)
    except (AgentsException, AgentsWorkflowError, ActivityError) as exc:
        # ActivityError: a model call that used up its retries
        if _aborted(exc):
            raise SagaAborted(str(exc)) from exc
        cause = exc.cause if isinstance(exc, ActivityError) and exc.cause else exc
        raise AgentRunFailed(f"the agent run failed: {type(exc).__name__}: {cause}") from exc


def _aborted(exc: BaseException) -> bool:
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        if isinstance(cause, SagaAborted):
            return True
        seen.add(id(cause))
        cause = cause.__cause__ or cause.__context__
    return False


@workflow.defn(name=AGENT_WORKFLOW)
class AgentSagaWorkflow:
    """An agent run (or a conversation) as one saga; compensates per the request's policy."""

    @workflow.init
    def __init__(self, request: AgentSagaRequest) -> None:
        self._request = request
        self._steps: list[AgentStep] = []
        self._inbox: list[str] = []
        #: each turn's output, by turn number (turn 0 answers the prompt)
        self._outputs: list[str] = []
        self._accepted = 1  # turns accepted so far, the prompt included
        self._finished = False
        self._closed: str | None = None
        # the saga's signals and updates exist from the first workflow task
        resume = request.resume
        self._saga = Saga(request.options, carry=resume.carry if resume else None)
        if request.resume is not None:
            # here, not in run: a `turn` sent at the hand-over may be taken before run starts
            self._outputs = list(request.resume.outputs)
            self._steps = list(request.resume.steps)
            self._accepted = request.resume.accepted

    @workflow.run
    async def run(self, request: AgentSagaRequest) -> AgentSagaResult:
        resume = request.resume
        saga = self._saga
        model = StoredConversationModel(request.model, saga_id=saga.saga_id)
        history: list[TResponseInputItem] = list(resume.history) if resume else []
        if resume is not None and resume.conversation is not None:
            history[:0] = await load_conversation(saga.saga_id, resume.conversation, model)

        def record(step: AgentStep) -> None:
            self._steps.append(step.model_copy(update={"turn": len(self._outputs)}))

        def go_on(carry: SagaCarry) -> None:
            stored, after = model.hand_over(history)
            handed = AgentResume(
                history=after,
                conversation=stored,
                outputs=self._outputs,
                steps=self._steps,
                accepted=self._accepted,
                carry=carry,
            )
            workflow.continue_as_new(request.model_copy(update={"resume": handed}))

        async def conversation() -> str:
            agent = _agent(
                request, model, await saga_function_tools(saga, request.tools, on_step=record)
            )
            message: str | None = None if resume else request.prompt
            while True:
                if message is not None:
                    # kept even if the run fails, so the compensation summary follows it
                    history.append({"role": "user", "content": message})
                    said = await _run_agent(agent, list(history), request.max_turns)
                    history[:] = said.to_input_list()
                    self._outputs.append(str(said.final_output))
                    if not request.multi_turn:
                        return self._outputs[-1]
                # a long conversation goes on in a new run between turns, once the last
                # turn's update has returned and no other is waiting
                long = saga.continue_as_new_suggested()

                def woken(long: bool = long) -> bool:
                    return (
                        bool(self._inbox)
                        or self._finished
                        or saga.aborted
                        or (long and workflow.all_handlers_finished())
                    )

                await workflow.wait_condition(woken)
                if long and not (self._inbox or self._finished or saga.aborted):
                    go_on(saga.carry())
                if not self._inbox:
                    return self._outputs[-1]
                message = self._inbox.pop(0)

        result = await saga.run(
            conversation,
            compensate_swallowed_failures=request.policy == "compensate",
            continue_as_new=go_on,
        )
        self._closed = (
            "the saga has ended"
            if result.error is None
            else f"the saga ended: {result.error.message}"
        )
        summary = compensation_summary(result)
        final = self._outputs[-1] if self._outputs else None
        if summary is not None and request.feed_compensation_summary:
            final = await self._tell(request, model, history, summary) or final
        # let `turn` updates that can no longer be answered return their refusal first
        await workflow.wait_condition(workflow.all_handlers_finished)
        return AgentSagaResult(
            final_output=final,
            saga=result,
            steps=self._steps,
            turns=self._outputs,
            compensation_summary=summary,
        )

    async def _tell(
        self,
        request: AgentSagaRequest,
        model: StoredConversationModel,
        history: list[TResponseInputItem],
        summary: str,
    ) -> str | None:
        """Give the agent the compensation summary (tools withdrawn); its answer, if it gives one."""
        try:
            said = await _run_agent(
                _agent(request, model),
                [*history, {"role": "user", "content": summary}],
                request.max_turns,
            )
        except SagacityError as exc:
            workflow.logger.warning("the agent could not be told of the compensation: %s", exc)
            return None
        return str(said.final_output)

    @workflow.update
    async def turn(self, message: str) -> str:
        """Send the agent another user message in this saga; returns its reply."""
        index = self._accepted
        self._accepted += 1
        self._inbox.append(message)
        await workflow.wait_condition(
            lambda: len(self._outputs) > index or self._closed is not None
        )
        if len(self._outputs) > index:
            return self._outputs[index]
        raise ApplicationError(
            f"turn {index} was not answered: {self._closed}", type="TurnNotAnswered"
        )

    @turn.validator
    def _validate_turn(self, message: str) -> None:
        if not self._request.multi_turn:
            raise ApplicationError("this agent saga takes one prompt (multi_turn is off)")
        if self._finished or self._closed is not None or self._saga.aborted:
            raise ApplicationError("the conversation is over")
        if not message.strip():
            raise ApplicationError("an empty message is not a turn")
        self._saga.refuse_if_busy("message")

    @workflow.signal
    def finish(self) -> None:
        """End the conversation once the turns already sent are answered."""
        self._finished = True

    @workflow.query
    def steps(self) -> list[AgentStep]:
        """The agent's tool calls so far."""
        return self._steps


AgentSagaRequest.model_rebuild()
