"""A worker app serving an MCP upstream's tools as saga tools, and the pieces to mix them into
an app of your own.

Ready-made: ``SAGACITY_MCP_POLICY=policy.yaml sagacity worker --app sagacity.mcp.app``. At
start its lifespan connects to the policy's upstream (a stdio command is started; an HTTP
server must answer within the policy's ``timeout_s``), lists its tools, checks the policy
against them and builds the saga tools; any problem stops the start with a clear error.

Your own app module, with Python tools beside the MCP ones::

    from sagacity.mcp.app import mcp_app

    TOOLS, lifespan = mcp_app("tickets.policy.yaml", tools=[book_flight])

or, inside a lifespan of your own that opens more, ``async with open_mcp_tools(path) as tools``
and make ``TOOLS`` a function returning ``[*tools, ...]`` from what your lifespan yields.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from sagacity.errors import SettingsError
from sagacity.mcp.policy import Policy, load_policy
from sagacity.mcp.session import McpSessionWorkflow
from sagacity.mcp.tools import mcp_tools
from sagacity.mcp.upstream import Upstream
from sagacity.settings import Settings
from sagacity.tools import CompensableTool

__all__ = ["TOOLS", "WORKFLOWS", "lifespan", "mcp_app", "open_mcp_tools"]

Tools = list[CompensableTool[..., Any]]

#: workflows this app serves beside the saga workflow (the MCP gateway's session workflow)
WORKFLOWS: list[type] = [McpSessionWorkflow]


@contextlib.asynccontextmanager
async def open_mcp_tools(policy: Policy | str | Path) -> AsyncIterator[Tools]:
    """The policy's saga tools, on an upstream session held open until the block ends.

    ``policy`` is a loaded :class:`Policy` or the path of its file. Raises
    :class:`~sagacity.errors.PolicyError` for a policy that is wrong or does not fit the
    upstream, :class:`~sagacity.errors.UpstreamUnavailable` when the upstream cannot be reached.
    """
    if not isinstance(policy, Policy):
        policy = load_policy(policy)
    async with Upstream(policy.server, folder=policy.folder) as upstream:
        yield mcp_tools(policy, upstream, await upstream.list_tools())


def mcp_app(
    policy: Policy | str | Path, *, tools: Sequence[CompensableTool[..., Any]] = ()
) -> tuple[Callable[[Tools], Tools], Callable[[], AbstractAsyncContextManager[Tools]]]:
    """``TOOLS, lifespan`` for an app module: the policy's MCP tools plus ``tools``."""

    def app_tools(opened: Tools) -> Tools:
        return [*opened, *tools]

    def app_lifespan() -> AbstractAsyncContextManager[Tools]:
        return open_mcp_tools(policy)

    return app_tools, app_lifespan


def lifespan(settings: Settings) -> AbstractAsyncContextManager[Tools]:
    """The ready-made app's lifespan: the tools of ``SAGACITY_MCP_POLICY``."""
    if settings.mcp_policy is None:
        raise SettingsError(
            "the app sagacity.mcp.app serves an MCP server's tools: set SAGACITY_MCP_POLICY to "
            "its policy file (see docs/mcp.md)"
        )
    return open_mcp_tools(settings.mcp_policy)


def TOOLS(opened: Tools) -> Tools:
    """The ready-made app's tools: those its lifespan opened."""
    return opened
