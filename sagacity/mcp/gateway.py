"""``sagacity mcp``: an MCP server in front of an upstream MCP server, for any MCP client.

Each client session gets a saga, the workflow ``sagacity.McpSession`` (:mod:`sagacity.mcp.session`),
started on the configured Temporal and task queue. A tool call becomes that workflow's update
``call``: the workers run it against the upstream as a journaled step (an IRREVERSIBLE one, or one
its ``needs_approval`` rule asks about, after a human approves it), so the gateway itself holds nothing that must survive it. While the client is
connected the gateway sends ``keepalive``; on a clean close, ``end``; a gateway killed outright
sends nothing, and the saga ends by its lease on the workers.

The client sees the tools the policy names (their schemas from the upstream) and two more, the
policy's ``commit_tool`` and ``rollback_tool``. A tool the policy does not name is refused with
an MCP error before anything starts. A failed call comes back as an ``isError`` result naming the
saga and what it compensated. While a call waits for its approval, the client gets a log message
and a progress notification saying why it waits, with the command that approves it; with an :class:`Elicitation`,
its user is also asked to decide (MCP elicitation), and the answer is a decision like any other.

Observe mode (:class:`Observer`) forwards every call straight to the upstream instead, records
which tools were called with which argument keys and what their results held, and writes a
policy skeleton to review.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import tempfile
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import jsonschema.exceptions
import jsonschema.validators
import mcp_types as types
from mcp.server import Server, ServerRequestContext
from mcp.shared.exceptions import MCPDeprecationWarning, MCPError
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.client import (
    Client,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
    WorkflowUpdateStage,
)
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError, RPCStatusCode

from sagacity.approval_policy import ApprovalPolicy
from sagacity.approvals import ApprovalService
from sagacity.errors import ApprovalConflict, ApprovalNotFound, PayloadTooLarge, SagacityError
from sagacity.mcp.policy import Policy, Seen, ServerSpec, result_data, skeleton
from sagacity.mcp.session import (
    MCP_SESSION_WORKFLOW,
    McpCall,
    McpEnd,
    McpSessionRequest,
)
from sagacity.mcp.upstream import call_result
from sagacity.mcp.wire import explain_uninitialized
from sagacity.temporal import limits
from sagacity.temporal.failures import error_type
from sagacity.temporal.models import (
    Abort,
    PendingApproval,
    SagaOptions,
    SagaState,
    SagaStatus,
)
from sagacity.temporal.names import SAGA_BUSY

__all__ = ["Elicitation", "Gateway", "Observer", "SagaSession"]

log = logging.getLogger("sagacity.mcp.gateway")

#: how often a call that runs is asked whether it waits for a human
_APPROVAL_POLL_S = 1.0
#: how long before an update a saga turned away as busy is sent again
BUSY_AGAIN_S = 0.2

#: the failure types of ``sagacity.McpSession``'s update ``call`` that end the saga
_ENDED = frozenset({"McpCallFailed", "McpCallRejected", "McpSessionEnded"})

Forward = Callable[[str, dict[str, Any]], Awaitable[types.CallToolResult]]


def _text(message: str, *, error: bool = True) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(text=message)], is_error=error)


def _session_tool(name: str, description: str) -> types.Tool:
    return types.Tool(
        name=name,
        description=description,
        input_schema={"type": "object", "properties": {}, "additionalProperties": False},
    )


async def _notify(ctx: ServerRequestContext[Any], message: str) -> None:
    """Tell the client while its call waits: a log message, and progress if it asked for it."""
    with warnings.catch_warnings():
        # logging is deprecated from protocol 2026-07-28 on, and still what clients show
        warnings.simplefilter("ignore", MCPDeprecationWarning)
        with contextlib.suppress(Exception):  # a client gone or not listening changes nothing
            await ctx.session.send_log_message(
                "warning", message, logger="sagacity", related_request_id=ctx.request_id
            )
    with contextlib.suppress(Exception):
        await ctx.session.report_progress(0, None, message)


@dataclass(frozen=True)
class Elicitation:
    """Approvals asked of the MCP client itself (elicitation), decided as ``approver`` through
    ``service`` (which signs with the approver's key, as ``sagacity approvals`` does)."""

    service: ApprovalService
    approver: str


#: what the client's form asks for
_DECISION_FORM: dict[str, Any] = {
    "type": "object",
    "properties": {
        "approve": {"type": "boolean", "title": "Approve this call?"},
        "reason": {"type": "string", "title": "Why (journaled with a rejection)"},
    },
    "required": ["approve"],
}


def _can_elicit(ctx: ServerRequestContext[Any]) -> bool:
    capabilities = ctx.session.client_capabilities
    return bool(capabilities and capabilities.elicitation and ctx.session.can_send_request)


class SagaSession:
    """One MCP client session's saga (with ``boundary: explicit``, its sagas, one at a time)."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.id = uuid.uuid4().hex[:12]
        self.sagas = 0
        self.handle: WorkflowHandle[Any, McpEnd] | None = None
        #: with ``boundary: session``, why the session takes no more calls once its saga ended
        self.closed: str | None = None
        self._lock = asyncio.Lock()
        self._keepalive: asyncio.Task[None] | None = None
        #: a call was sent and its outcome not seen (its client may have gone meanwhile)
        self._in_flight = False

    @property
    def policy(self) -> Policy:
        return self.gateway.policy

    def _saga_id(self) -> str:
        n = self.sagas
        return f"mcp-{self.policy.server.name}-{self.id}" + (f"-{n}" if n > 1 else "")

    async def _open(self) -> WorkflowHandle[Any, McpEnd]:
        if self.handle is not None:
            return self.handle
        if self.closed is not None:
            raise _Refused(self.closed)
        self.sagas += 1
        spec = self.policy.session
        request = McpSessionRequest(
            server=self.policy.server.name,
            boundary=spec.boundary,
            on_end=spec.on_end,
            lease_s=spec.lease_s,
            options=self.gateway.options,
        )
        try:
            self.handle = await self.gateway.client.start_workflow(
                MCP_SESSION_WORKFLOW,
                request,
                id=self._saga_id(),
                task_queue=self.gateway.task_queue,
                result_type=McpEnd,
            )
        except RPCError as err:
            raise _Refused(f"no saga could be started, so nothing ran: {err.message}") from None
        log.info("session %s: saga %s started", self.id, self.handle.id)
        self._keepalive = asyncio.create_task(self._keep_alive(self.handle, spec.lease_s))
        return self.handle

    def _ended(self, message: str) -> None:
        """The current saga ended: stop its keepalive; with ``boundary: session``, the session."""
        if self._keepalive is not None:
            self._keepalive.cancel()
            self._keepalive = None
        if self.handle is not None:
            log.info("session %s: saga %s ended: %s", self.id, self.handle.id, message)
        self.handle = None
        if self.policy.session.boundary == "session":
            self.closed = message

    async def _keep_alive(self, handle: WorkflowHandle[Any, McpEnd], lease_s: float) -> None:
        # three beats per lease: one lost beat never costs the session
        while True:
            await asyncio.sleep(max(lease_s / 3, 0.2))
            try:
                await handle.signal("keepalive")
            except RPCError as err:
                if err.status is RPCStatusCode.NOT_FOUND:
                    return  # it ended (an abort, a terminate): the next call finds out
                log.warning("session %s: keepalive to %s failed: %s", self.id, handle.id, err)

    async def call(
        self, ctx: ServerRequestContext[Any], tool: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        """Run one call in the session's saga, one at a time; its result, or an error result."""
        async with self._lock:
            while True:
                try:
                    handle = await self._open()
                except _Refused as exc:
                    return _text(str(exc))
                expires = datetime.now(UTC) + timedelta(seconds=self.gateway.accept_timeout_s)
                update = McpCall(tool=tool, arguments=arguments, expires_at=expires)
                watch = asyncio.create_task(self._watch_approval(ctx, handle, tool))
                self._in_flight = True
                try:
                    result = await self._update(handle, "call", update)
                except _Gone:
                    self._in_flight = False
                    if self.closed is None:
                        continue  # explicit: the saga ended while idle; the call goes to a new one
                    return _text(self.closed)
                except _Refused as exc:
                    self._in_flight = False
                    return _text(str(exc))
                finally:
                    watch.cancel()
                self._in_flight = False
                return self.gateway.answer(tool, call_result(result))

    async def finish(self, how: str) -> types.CallToolResult:
        """``commit`` or ``rollback`` the current saga; what became of it, in words."""
        if how == "rollback" and self._in_flight and self.handle is not None:
            # not behind the call in flight: it may wait for a human, and the rollback ends it
            return await self._finish(how)
        async with self._lock:
            return await self._finish(how)

    async def _finish(self, how: str) -> types.CallToolResult:
        """The rollback or commit update, without the lock."""
        if self.handle is None:
            if self.closed is not None:
                return _text(self.closed)
            return _text(
                f"nothing to {how}: no call was made since the last saga ended", error=False
            )
        try:
            end = McpEnd.model_validate(await self._update(self.handle, how, None))
        except _Refused as exc:
            return _text(str(exc))
        self._ended(end.message)
        # a rollback that aborted a call at its approval gate ends ABORTED, as asked
        failed = end.state not in (SagaState.COMPLETED, SagaState.COMPENSATED, SagaState.ABORTED)
        return _text(end.message, error=failed)

    async def _update(
        self, handle: WorkflowHandle[Any, McpEnd], name: str, arg: McpCall | None
    ) -> Any:
        """Send the update; wait for a worker to take it (up to the accept timeout), then for
        its outcome. A failure that ends the saga ends it here too, and is :class:`_Refused`.

        One the saga turns away while it opens or seals its journal (``SagaBusy``: nothing
        recorded, nothing run) is sent again, as a new update, within the accept timeout.
        """
        args = [] if arg is None else [arg]
        deadline = asyncio.get_running_loop().time() + self.gateway.accept_timeout_s
        busy = False
        while True:
            left = deadline - asyncio.get_running_loop().time()
            try:
                update = await asyncio.wait_for(
                    handle.start_update(
                        name,
                        args=args,
                        wait_for_stage=WorkflowUpdateStage.ACCEPTED,
                        result_type=Any,
                    ),
                    max(left, 0.0),
                )
            except (TimeoutError, WorkflowUpdateRPCTimeoutOrCancelledError):
                # the SDK turns the cancel of an update still waiting for a worker into its own
                # error
                raise self._not_taken(handle, busy=busy) from None
            except RPCError as err:
                raise self._refusal(handle, name, err) from None
            try:
                return await update.result()
            except WorkflowUpdateRPCTimeoutOrCancelledError:
                _raise_if_cancelled()
                raise
            except WorkflowUpdateFailedError as err:
                # a rejection is the update's outcome, known at once: result() raises it
                if error_type(err) != SAGA_BUSY:
                    raise self._refusal(handle, name, err) from None
                busy = True
                if deadline - asyncio.get_running_loop().time() < BUSY_AGAIN_S:
                    raise self._not_taken(handle, busy=busy) from None
                await asyncio.sleep(BUSY_AGAIN_S)
            except RPCError as err:
                raise self._refusal(handle, name, err) from None

    def _not_taken(self, handle: WorkflowHandle[Any, McpEnd], *, busy: bool) -> _Refused:
        """What the client is told of a call no worker took within the accept timeout."""
        waited = f"within {self.gateway.accept_timeout_s:g}s"
        if busy:
            return _Refused(
                f"saga {handle.id} stayed busy opening or sealing its journal {waited} (is its "
                "Postgres reachable?); the call was not run and will not run"
            )
        return _Refused(
            f"no Sagacity worker took the call {waited} (task queue "
            f"{self.gateway.task_queue!r}, saga {handle.id}); it was not run and will not run. "
            "Is `sagacity worker --app sagacity.mcp.app` running?"
        )

    def _refusal(
        self,
        handle: WorkflowHandle[Any, McpEnd],
        name: str,
        err: WorkflowUpdateFailedError | RPCError,
    ) -> _Refused:
        """What the client is told of a failed update; a failure that ended the saga ends it
        here too."""
        if isinstance(err, RPCError):
            if err.status is not RPCStatusCode.NOT_FOUND:
                return _Refused(f"saga {handle.id}: {name} could not be sent: {err.message}")
            # the workflow is gone: it ended by itself (its lease, an abort) or was terminated
            message = f"saga {handle.id} has ended ({err.message}); {name} was not run"
            self._ended(message)
            return _Gone(message)
        cause = err.cause
        if not isinstance(cause, ApplicationError):
            return _Refused(f"saga {handle.id}: {name} failed: {cause}")
        if cause.type in _ENDED:
            self._ended(cause.message)
        return _Refused(cause.message)

    async def _watch_approval(
        self, ctx: ServerRequestContext[Any], handle: WorkflowHandle[Any, McpEnd], tool: str
    ) -> None:
        asks: list[asyncio.Task[None]] = []
        try:
            await self._watch(ctx, handle, tool, asks)
        finally:
            for ask in asks:
                ask.cancel()

    async def _watch(
        self,
        ctx: ServerRequestContext[Any],
        handle: WorkflowHandle[Any, McpEnd],
        tool: str,
        asks: list[asyncio.Task[None]],
    ) -> None:
        told: set[int] = set()
        while True:
            await asyncio.sleep(_APPROVAL_POLL_S)
            try:
                status = await handle.query("status", result_type=SagaStatus)
            except Exception:  # no worker to answer, or the saga ended: nothing to tell
                continue
            pending = status.pending_approval
            if pending is None or pending.journal_seq in told:
                continue
            told.add(pending.journal_seq)
            message = waiting_message(tool, handle.id, pending)
            log.warning("%s", message)
            await _notify(ctx, message)
            if self.gateway.elicitation is not None and _can_elicit(ctx):
                # asked beside the wait: the other routes still decide meanwhile
                asks.append(asyncio.create_task(self._ask(ctx, handle, pending, message)))

    async def _ask(
        self,
        ctx: ServerRequestContext[Any],
        handle: WorkflowHandle[Any, McpEnd],
        pending: PendingApproval,
        message: str,
    ) -> None:
        """Ask the client's user to decide; an answer is a decision like any other."""
        elicitation = self.gateway.elicitation
        assert elicitation is not None
        try:
            answer = await ctx.session.elicit_form(
                f"{message}\n{_approved_input(pending)}\n"
                f"Your answer is journaled as {elicitation.approver}'s decision.",
                _DECISION_FORM,
                related_request_id=ctx.request_id,
            )
        except Exception as exc:  # the client cannot ask, or has gone: other routes decide
            log.info("session %s: no answer through elicitation: %s", self.id, exc)
            return
        if answer.action == "cancel":
            return  # dismissed: the request still waits for another route
        content = answer.content or {}
        service, seq = elicitation.service, pending.journal_seq
        if answer.action == "accept" and not isinstance(content.get("approve"), bool):
            # a form the client filled wrongly decides nothing, rather than a rejection
            await _notify(
                ctx,
                f"your decision on request {seq} was not taken: the answer did not say approve "
                "true or false. The call waits for a decision by another route.",
            )
            return
        try:
            if answer.action == "accept" and content.get("approve") is True:
                await service.approve(
                    handle.id, seq, approver=elicitation.approver, input_hash=pending.input_hash
                )
            else:
                reason = str(content.get("reason") or "declined in the MCP client")
                await service.reject(handle.id, seq, approver=elicitation.approver, reason=reason)
        except (ApprovalConflict, ApprovalNotFound) as exc:  # decided another way meanwhile
            log.info("session %s: the client's decision came too late: %s", self.id, exc)
        except SagacityError as exc:  # refused: the request still waits
            said = f"your decision on request {seq} was not taken: {exc}"
            log.warning("session %s: %s", self.id, said)
            # told, so the client's user does not wait on an answer that was lost
            await _notify(ctx, f"{said}. The call waits for a decision by another route.")

    async def close(self, reason: str) -> None:
        """The client's session closed cleanly: its open saga follows the policy's ``on_end``.

        A call still in flight under ``on_end: compensate`` (its client left mid-call, perhaps
        while it waits for an approval nobody will now wait for) aborts the saga instead.
        """
        handle = self.handle
        self._ended(reason)
        if handle is None:
            return
        try:
            if self._in_flight and self.policy.session.on_end == "compensate":
                why = f"{reason} with a call in flight"
                await handle.signal("abort", Abort(reason=why, by="sagacity-mcp"))
            else:
                await handle.signal("end", reason)
        except RPCError as err:
            log.warning("session %s: could not end %s: %s", self.id, handle.id, err)


def waiting_message(tool: str, saga_id: str, pending: PendingApproval) -> str:
    """What the client is told of a call at its approval gate: why it waits (the tool is
    IRREVERSIBLE, or the sentence of the rule that asked), who must approve, and how."""
    seq = pending.journal_seq
    if pending.why is None:  # only an IRREVERSIBLE tool's request names no rule
        said = f"{tool} is IRREVERSIBLE and waits for a human's approval (saga {saga_id}, "
    else:
        said = f"{tool} waits for a human's approval under {pending.why} (saga {saga_id}, "
    said += f"request {seq})."
    quorum = pending.quorum
    if quorum is not None:
        needs = ApprovalPolicy(
            required=quorum.required,
            group=quorum.group,
            starter_may_approve=quorum.starter_may_approve,
        )
        said += f" It needs {needs.label}."
    return (
        f"{said} Approve: sagacity approvals approve {saga_id} {seq}   Reject: sagacity "
        f"approvals reject {saga_id} {seq} --reason '...'"
    )


#: how much of a call's input an elicitation shows (the CLI and console show all of it)
_INPUT_CHARS = 4000


def _approved_input(pending: PendingApproval) -> str:
    """What the approver decides on: the tool and its input, as the approval request stores it
    (the worker's redaction rules applied)."""
    text = pending.input_json
    if len(text) > _INPUT_CHARS:
        text = (
            f"{text[:_INPUT_CHARS]}… ({len(pending.input_json)} characters: see them all with "
            "sagacity approvals show)"
        )
    hidden = f" (hidden by redaction: {', '.join(pending.hidden)})" if pending.hidden else ""
    return f"Tool: {pending.tool_name}\nInput{hidden}: {text}"


def _raise_if_cancelled() -> None:
    """The SDK reports this task's own cancellation (its client gone, the gateway stopping) as
    WorkflowUpdateRPCTimeoutOrCancelledError: raise it as the cancellation it is, which the MCP
    library ends quietly instead of logging a handler's failure."""
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class _Refused(Exception):
    """A call or commit that did not run, or ended its saga: the message is the client's."""


class _Gone(_Refused):
    """The saga's workflow had already ended: nothing was sent to it."""


class Gateway:
    """The MCP server of ``sagacity mcp``: the policy's tools, each call a step of a saga."""

    def __init__(
        self,
        policy: Policy,
        upstream_tools: Sequence[types.Tool],
        client: Client,
        task_queue: str,
        *,
        options: SagaOptions | None = None,
        accept_timeout_s: float = 30.0,
        elicitation: Elicitation | None = None,
        shared_saga: bool = False,
    ) -> None:
        self.policy = policy
        self.elicitation = elicitation
        #: HTTP clients without an MCP session (protocol 2026-07-28) share one saga; refused when
        #: False: one client's rollback would undo another's calls
        self.shared_saga = shared_saga
        self.client = client
        self.task_queue = task_queue
        self.options = options or SagaOptions()
        self.accept_timeout_s = accept_timeout_s
        by_name = {tool.name: tool for tool in upstream_tools}
        spec = policy.session
        self.tools = [by_name[name] for name in policy.tools if name in by_name]
        self.tools += [
            _session_tool(
                spec.commit_tool,
                "Commit the saga of this session's tool calls: what they did stays done.",
            ),
            _session_tool(
                spec.rollback_tool,
                "Roll back the saga of this session's tool calls: each one is undone, newest "
                "first.",
            ),
        ]
        self._offered = {tool.name for tool in self.tools}
        self._schemas = {t.name: t.output_schema for t in self.tools if t.output_schema}
        self.sessions: dict[str, SagaSession] = {}

    def session_for(self, ctx: ServerRequestContext[Any]) -> SagaSession:
        """The client session's saga session: by its ``Mcp-Session-Id`` over HTTP; a stdio
        gateway serves one client. An HTTP request with no session is refused (an MCP error)
        unless ``shared_saga``."""
        request = ctx.request
        headers = getattr(request, "headers", None)
        key = (headers.get("mcp-session-id") if headers is not None else None) or ""
        if headers is not None and not key and not self.shared_saga:
            raise MCPError(
                types.INVALID_REQUEST,
                "this gateway keeps one saga per MCP session, and this request belongs to none "
                "(a client on the 2026-07-28 protocol over HTTP); sharing one saga between "
                "clients would let one roll back another's calls. Connect with the session "
                "handshake (protocol 2025-11-25 or older), or over stdio; a gateway with a "
                "single client may be started with --shared-saga",
            )
        session = self.sessions.get(key)
        if session is None:
            session = self.sessions[key] = SagaSession(self)
        return session

    def answer(self, tool: str, result: types.CallToolResult) -> types.CallToolResult:
        """``result``, or an error result saying why it no longer fits the tool's output
        schema (a result cut to fit Temporal can break it): a client that validates output
        would otherwise fail on it with an exception."""
        schema = self._schemas.get(tool)
        if schema is None or result.structured_content is None:
            return result
        error = jsonschema.exceptions.best_match(
            jsonschema.validators.validator_for(schema)(schema).iter_errors(
                result.structured_content
            )
        )
        if error is None:
            return result
        said = "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))
        return _text(
            f"{tool} ran, but its result, cut to fit Sagacity's journal, no longer fits the "
            f"tool's output schema ({error.message[:300]}); the result as journaled:\n{said}"
        )

    def server(self) -> Server[Any]:
        return _server(
            f"sagacity-{self.policy.server.name}",
            self.tools,
            self.call,
            instructions=(
                f"Tools of {self.policy.server.name}, each call a journaled step of a saga. "
                f"Call {self.policy.session.commit_tool} to keep what the calls did, "
                f"{self.policy.session.rollback_tool} to undo it."
            ),
        )

    async def call(
        self, ctx: ServerRequestContext[Any], name: str, arguments: dict[str, Any]
    ) -> types.CallToolResult:
        if name not in self._offered:
            source = self.policy.source or "the policy"
            raise MCPError(
                types.INVALID_PARAMS,
                f"tool {name!r} is refused: {source} does not name it, so this gateway does not "
                f"offer it (offered: {', '.join(sorted(self._offered))})",
            )
        session = self.session_for(ctx)
        spec = self.policy.session
        if name == spec.commit_tool:
            return await session.finish("commit")
        if name == spec.rollback_tool:
            return await session.finish("rollback")
        await self._refuse_oversized(name, arguments)
        return await session.call(ctx, name, arguments)

    async def _refuse_oversized(self, name: str, arguments: dict[str, Any]) -> None:
        """An MCP error for arguments too large for Temporal's history, before anything is
        sent: the update would wedge the session's saga (``sagacity.temporal.limits``)."""
        size = await limits.encoded_size(
            self.client.data_converter, McpCall(tool=name, arguments=arguments)
        )
        try:
            limits.check(f"the arguments of {name!r}", size)
        except PayloadTooLarge as exc:
            raise MCPError(types.INVALID_PARAMS, f"{exc}; the session goes on") from None

    def http_app(self, host: str) -> ASGIApp:
        """The streamable HTTP app; a client's ``DELETE`` of its session ends that session's saga."""
        app = self.server().streamable_http_app(host=host)

        async def ending_sessions(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http" and scope["method"] == "DELETE":
                key = dict(scope["headers"]).get(b"mcp-session-id", b"").decode("latin-1")
                session = self.sessions.pop(key, None) if key else None
                if session is not None:
                    await session.close("the MCP client ended its session")
            await app(scope, receive, send)

        return ending_sessions

    async def close(self, reason: str = "the MCP session closed") -> None:
        """End every open session's saga (a clean close: ``on_end`` decides what happens)."""
        await asyncio.gather(*(s.close(reason) for s in self.sessions.values()))
        self.sessions.clear()


def _server(
    name: str,
    tools: list[types.Tool],
    call: Callable[
        [ServerRequestContext[Any], str, dict[str, Any]], Awaitable[types.CallToolResult]
    ],
    *,
    instructions: str | None = None,
) -> Server[Any]:
    """An MCP server that lists ``tools`` and hands each call to ``call``."""

    async def list_tools(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        return types.ListToolsResult(tools=tools)

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        return await call(ctx, params.name, params.arguments or {})

    server = Server(
        name, instructions=instructions, on_list_tools=list_tools, on_call_tool=call_tool
    )
    server.middleware.append(explain_uninitialized)
    return server


def _result_keys(result: types.CallToolResult) -> set[str]:
    """The top-level keys of a result's data, read as a compensation mapping reads it."""
    data = result_data(result.model_dump(mode="json", by_alias=True, exclude_none=True))
    return set(data) if isinstance(data, dict) else set()


class Observer:
    """Observe mode: every call forwarded to the upstream as is, and what was seen written out
    as a policy skeleton (``reviewed: false``) whenever it changed, at most every ``every_s``."""

    def __init__(
        self,
        server: ServerSpec,
        upstream_tools: Sequence[types.Tool],
        forward: Forward,
        out: Path,
        *,
        every_s: float = 5.0,
    ) -> None:
        self.spec = server
        self.tools = list(upstream_tools)
        self.forward = forward
        self.out = out
        self.every_s = every_s
        self.seen: dict[str, Seen] = {}
        self._changed = True

    def server(self) -> Server[Any]:
        return _server(
            f"sagacity-observe-{self.spec.name}",
            self.tools,
            lambda ctx, name, arguments: self.call(name, arguments),
        )

    async def call(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        result = await self.forward(name, arguments)
        seen = self.seen.setdefault(name, Seen())
        seen.calls += 1
        seen.argument_keys.update(arguments)
        if not result.is_error:
            seen.result_keys.update(_result_keys(result))
        self._changed = True
        return result

    def write(self) -> None:
        """Write the skeleton now (atomically: a reader never sees half a file)."""
        text = skeleton(self.spec, self.seen, self.tools)
        self.out.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self.out.parent, prefix=f".{self.out.name}.")
        with os.fdopen(fd, "w") as out:
            out.write(text)
        os.replace(tmp, self.out)
        self._changed = False

    @contextlib.asynccontextmanager
    async def writing(self) -> AsyncIterator[None]:
        """Write the skeleton now, every ``every_s`` while it changes, and on the way out."""

        async def periodically() -> None:
            while True:
                await asyncio.sleep(self.every_s)
                if self._changed:
                    self.write()

        self.write()
        task = asyncio.create_task(periodically())
        try:
            yield
        finally:
            task.cancel()
            self.write()
            log.info("observe: policy skeleton written to %s", self.out)
