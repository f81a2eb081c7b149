"""An MCP upstream's tools as saga tools, as its policy declares them.

``mcp_tools(policy, upstream, listed)`` gives one :class:`~sagacity.tools.CompensableTool` per
tool the policy names: named as the MCP tool (so an agent's model calls it by that name), its
arguments checked against the upstream's ``inputSchema`` before INTENT, its description the
upstream's, its reversibility, idempotency and approval keys (``needs_approval``,
``approval_sla``, ``approval_policy``) the policy's. A call runs through the shared
:class:`~sagacity.mcp.upstream.Upstream`; its journaled result is the upstream's result without
``isError`` (``{"content": [...], "structuredContent": {...}}``).

Failures: an ``isError`` result (:class:`~sagacity.errors.UpstreamReported`) is a FAILED row
with no effect, so nothing is compensated, unless the policy says ``error_may_have_effect``;
an upstream that cannot be reached before the call is sent is FAILED with no effect too. A call
whose connection broke or timed out is FAILED with its effect unknown: compensated (the
compensation sees ``failed``), or, for an idempotent tool, retried first.

Compensation: the policy's compensation tool, called through the same upstream with arguments
mapped from the call's journaled input and result (plus constants); a mapping that names
nothing fails the compensation at once (COMPENSATION_FAILED, for a human), never skipped. Or a
Python function taking a :class:`~sagacity.tools.CompensationContext`. A read-only tool's undo
does nothing, journaled all the same.
"""

from __future__ import annotations

import importlib
from collections.abc import Awaitable, Iterable
from datetime import timedelta
from typing import Any, cast

from mcp.types import Tool

from sagacity.errors import (
    CompensationUnresolvable,
    PolicyError,
    ToolDeclarationError,
    UpstreamReported,
    UpstreamUnavailable,
)
from sagacity.mcp.policy import Compensation as PolicyCompensation
from sagacity.mcp.policy import Policy, ToolPolicy, check_against, resolve_path
from sagacity.mcp.upstream import Upstream
from sagacity.tools import (
    CompensableTool,
    Compensation,
    CompensationContext,
    JsonArguments,
    Reversibility,
    compensable,
)

__all__ = ["mcp_tools"]

#: a call may reconnect (up to the upstream's timeout) before it waits for its answer (as
#: long again); the tool's own limit comes after both, so the upstream's clearer error wins
_SLACK = timedelta(seconds=5)


def mcp_tools(
    policy: Policy, upstream: Upstream, listed: Iterable[Tool]
) -> list[CompensableTool[..., Awaitable[dict[str, Any]]]]:
    """The saga tools of the policy's named upstream tools; ``listed`` is the upstream's tool
    list. :class:`~sagacity.errors.PolicyError` when the policy does not fit it (or names a
    compensation function that cannot be imported);
    :class:`~sagacity.errors.ToolDeclarationError` for an upstream schema no call could be
    checked against."""
    offered = {tool.name: tool for tool in listed}
    check_against(policy, offered.values())
    return [
        _saga_tool(policy, upstream, offered[name], spec) for name, spec in policy.tools.items()
    ]


def _saga_tool(
    policy: Policy, upstream: Upstream, tool: Tool, spec: ToolPolicy
) -> CompensableTool[..., Awaitable[dict[str, Any]]]:
    name = tool.name

    async def call(**arguments: Any) -> dict[str, Any]:
        return (await upstream.call(name, arguments)).journaled()

    call.__name__ = call.__qualname__ = name
    call.__doc__ = tool.description
    no_effect: tuple[type[BaseException], ...] = (UpstreamUnavailable,)
    if not spec.error_may_have_effect:
        no_effect += (UpstreamReported,)
    declare = compensable(
        by=_compensation(policy, upstream, name, spec),
        # the engine judges these as any tool's: they travel in the catalog a saga records
        needs_approval=spec.needs_approval or False,
        approval_sla=spec.approval_sla,
        approval_policy=spec.approval_policy,
        reversibility=Reversibility.REVERSIBLE if spec.read_only else spec.reversibility,
        name=name,
        description=tool.description
        or tool.title
        or f"{name} (MCP upstream {upstream.server.name})",
        idempotent=spec.is_idempotent,
        timeout=2 * timedelta(seconds=upstream.timeout_s) + _SLACK,
        no_effect_on=no_effect,
    )
    try:
        saga_tool: CompensableTool[..., Awaitable[dict[str, Any]]] = declare(call)
    except ToolDeclarationError as exc:  # a Policy built in code skips parse_policy's checks
        raise PolicyError(f"{policy.where()}: tools.{name}: {exc}") from None
    saga_tool.json_arguments = JsonArguments.of(
        tool.input_schema,
        owner=f"MCP tool {name!r} of upstream {upstream.server.name!r}",
        field="inputSchema",
    )
    return saga_tool


def _compensation(
    policy: Policy, upstream: Upstream, name: str, spec: ToolPolicy
) -> Compensation | None:
    if spec.read_only:
        return _nothing_to_undo
    undo = spec.compensation
    if undo is None:
        return None
    if undo.function is not None:
        return _function(policy, name, undo.function)
    return _mapped(upstream, name, undo)


def _nothing_to_undo(ctx: CompensationContext) -> None:
    """A read-only tool's undo: it had no effect."""


def _function(policy: Policy, name: str, spec: str) -> Compensation:
    """The function ``package.module:name``, imported now so a mistake stops the worker's
    start, not a saga's compensation."""
    module_name, _, attribute = spec.partition(":")
    where = f"{policy.where()}: tools.{name}.compensation.function {spec!r}"
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise PolicyError(
            f"{where}: cannot import {module_name!r} ({type(exc).__name__}: {exc}); it must be "
            "importable by the worker (the current directory or PYTHONPATH)"
        ) from None
    found = getattr(module, attribute, None)
    if not callable(found):
        raise PolicyError(
            f"{where}: {module_name} has no function {attribute!r}; define "
            f"def {attribute}(ctx: CompensationContext) -> None there"
        )
    return cast(Compensation, found)


def _mapped(upstream: Upstream, name: str, undo: PolicyCompensation) -> Compensation:
    assert undo.tool is not None  # the policy's rule: tool or function
    target = undo.tool

    async def compensate(ctx: CompensationContext) -> None:
        await upstream.call(target, _arguments(name, undo, ctx))

    compensate.__name__ = compensate.__qualname__ = f"{name}_by_{target}"
    return compensate


def _arguments(name: str, undo: PolicyCompensation, ctx: CompensationContext) -> dict[str, Any]:
    """The compensation tool's arguments; a permanent failure when a path names nothing (no
    attempt could do better: the workflow journals COMPENSATION_FAILED at once)."""
    arguments = dict(undo.constants)
    for argument, path in undo.arguments.items():
        try:
            arguments[argument] = resolve_path(path, input=ctx.input, result=ctx.result)
        except LookupError as exc:
            why = str(exc)
            if ctx.failed and path.startswith("result."):
                why = f"the call FAILED with its effect unknown, so it has no result for {path}"
            raise CompensationUnresolvable(
                f"cannot compensate {name} (saga {ctx.saga_id}, seq {ctx.seq}) with "
                f"{undo.tool}: argument {argument!r}: {why}; a human must check whether the "
                "effect exists and undo it"
            ) from None
    return arguments
