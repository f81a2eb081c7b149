"""One MCP client session to a policy's upstream server, kept open and reopened when it breaks.

:class:`Upstream` is an async context manager: entering it connects (a stdio upstream's command
is started; an HTTP upstream must answer), or raises
:class:`~sagacity.errors.UpstreamUnavailable` within the server's timeout instead of hanging.
Every failure of a call is a typed :class:`~sagacity.errors.UpstreamToolError`:

* the upstream's result says ``isError`` (or it answers with a JSON-RPC error):
  :class:`~sagacity.errors.UpstreamReported`, ``is_error_result`` true: the upstream reported
  the failure itself;
* the connection breaks during the call, the call times out, or the answer is malformed: the
  effect is unknown (``is_error_result`` false);
* the connection cannot be (re)opened before the call is sent: ``UpstreamUnavailable``; the
  call was never sent.

A connection found closed before a call (a stdio server that exited, an HTTP server that went
away) is reopened first, so that call is sent to the new session; a call that was in flight when
the connection broke is never resent here (whether it took effect is unknown): the saga's retry
rules for the tool decide.
"""

from __future__ import annotations

import asyncio
import copy
import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError
from mcp.types import CallToolResult, TextContent, Tool
from mcp_types import CONNECTION_CLOSED, REQUEST_TIMEOUT
from pydantic import ValidationError

from sagacity.errors import UpstreamReported, UpstreamToolError, UpstreamUnavailable
from sagacity.mcp.policy import ServerSpec

__all__ = ["CallOutcome", "Upstream", "call_result", "error_text", "journaled"]

log = logging.getLogger("sagacity.mcp")

#: how much of an upstream's error text an error message keeps
_ERROR_CHARS = 2000
#: how long a closing connection may take before its task is cancelled
_CLOSE_S = 5.0
#: the largest journaled result, in characters of ASCII JSON: a result travels in the call's
#: Temporal payload, which Temporal refuses past a few megabytes (the saga would wait forever)
RESULT_CHARS = 512 * 1024


@dataclass(frozen=True, slots=True)
class CallOutcome:
    """A successful call's result, as the journal keeps it (see :func:`journaled`)."""

    result: CallToolResult

    def journaled(self) -> dict[str, Any]:
        return journaled(self.result)


def journaled(result: CallToolResult) -> dict[str, Any]:
    """A call's result as JSON, without ``isError``: ``{"content": [...]}`` plus
    ``"structuredContent"`` when the upstream gave one. Content blocks of every kind (text,
    images, resources) are kept as the protocol spells them, except a text block that only
    restates ``structuredContent`` as JSON (the protocol asks servers to add one): kept, it
    would carry every value a second time, as text that redaction rules (which match keys)
    cannot reach. :func:`call_result` puts it back.

    A result over :data:`RESULT_CHARS` keeps what fits: its largest parts are replaced, one by
    one, with a text block saying what was left out; then the longest strings of
    ``structuredContent``, each with a note of its length and sha256; ``structuredContent``
    as a whole last.
    """
    structured = result.structured_content
    blocks = [
        block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
    ]
    data: dict[str, Any] = {"content": [b for b in blocks if not _restates(b, structured)]}
    if structured is not None:
        data["structuredContent"] = structured
    return _bounded(data)


def _bounded(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` under :data:`RESULT_CHARS`, its largest content blocks (then its structured
    content) replaced by notes saying what was left out."""
    size = _chars(data)
    if size <= RESULT_CHARS:
        return data
    log.warning(
        "an MCP result of %d characters is over the journal's %d: its largest parts are left out",
        size,
        RESULT_CHARS,
    )
    content = list(data["content"])
    sizes = [_chars(block) for block in content]
    for index in sorted(range(len(content)), key=sizes.__getitem__, reverse=True):
        if size <= RESULT_CHARS:
            break
        content[index] = _left_out(f"a {content[index].get('type', '?')} block", sizes[index])
        size -= sizes[index] - _chars(content[index])
    data = {**data, "content": content}
    if size > RESULT_CHARS and "structuredContent" in data:
        # its long strings cut, the structured content keeps its shape: result.id still
        # resolves for a compensation, and the value still fits a schema's string type
        data["structuredContent"] = _pruned(data["structuredContent"], size - RESULT_CHARS)
        size = _chars(data)
    if size > RESULT_CHARS and "structuredContent" in data:
        left_out = _left_out("the structured content", _chars(data.pop("structuredContent")))
        data["content"] = [*content, left_out]
    return data


#: a string this long or shorter is never cut from structured content
_KEEP_CHARS = 256


def _pruned(value: Any, excess: int) -> Any:
    """``value`` with its longest strings (longest first) replaced by a note of their length
    and sha256, until ``excess`` characters are gone or no string over :data:`_KEEP_CHARS` is
    left."""
    strings: list[tuple[int, tuple[Any, ...]]] = []

    def walk(node: Any, at: tuple[Any, ...]) -> None:
        if isinstance(node, str) and at and len(node) > _KEEP_CHARS:
            strings.append((_chars(node), at))
        elif isinstance(node, dict):
            for key, item in node.items():
                walk(item, (*at, key))
        elif isinstance(node, list):
            for index, item in enumerate(node):
                walk(item, (*at, index))

    walk(value, ())
    pruned = copy.deepcopy(value)
    for size, at in sorted(strings, key=lambda found: found[0], reverse=True):
        if excess <= 0:
            break
        parent = pruned
        for part in at[:-1]:
            parent = parent[part]
        text: str = parent[at[-1]]
        digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
        parent[at[-1]] = (
            f"[cut by Sagacity: a string of {len(text)} characters, sha256 {digest}; a "
            f"journaled result is kept under {RESULT_CHARS} characters]"
        )
        excess -= size - _chars(parent[at[-1]])
    return pruned


def _left_out(what: str, size: int) -> dict[str, Any]:
    return {
        "type": "text",
        "text": f"[left out by Sagacity: {what} of {size} characters; a journaled result is "
        f"kept under {RESULT_CHARS} characters]",
    }


def _chars(value: Any) -> int:
    return len(json.dumps(value))  # ASCII: no shorter than its UTF-8 bytes


def call_result(data: Mapping[str, Any]) -> CallToolResult:
    """A journaled result (see :func:`journaled`) as the upstream's CallToolResult, the text
    block restating ``structuredContent`` put back when it has no text of its own."""
    content = list(data.get("content") or [])
    structured = data.get("structuredContent")
    if structured is not None and not any(b.get("type") == "text" for b in content):
        content.append({"type": "text", "text": json.dumps(structured, ensure_ascii=False)})
    return CallToolResult.model_validate({"content": content, "structuredContent": structured})


def _restates(block: Mapping[str, Any], structured: Any) -> bool:
    if structured is None or block.get("type") != "text" or set(block) != {"type", "text"}:
        return False
    try:
        return bool(json.loads(block["text"]) == structured)
    except ValueError:
        return False


def error_text(result: CallToolResult) -> str:
    """The text an ``isError`` result carries (its text blocks), shortened for a message."""
    text = "\n".join(b.text for b in result.content if isinstance(b, TextContent)).strip()
    text = text or "(the upstream gave no text)"
    return text if len(text) <= _ERROR_CHARS else text[:_ERROR_CHARS] + "…"


class Upstream:
    """The policy's upstream MCP server, through one client session shared by all callers.

    A stdio upstream runs with the MCP package's safe environment (PATH, HOME and the like, not
    the worker's secrets) plus the policy's ``env``, in the policy's ``cwd`` (default
    ``folder``: the policy file's folder).
    """

    def __init__(self, server: ServerSpec, *, folder: Path | None = None) -> None:
        self.server = server
        self.folder = folder or Path.cwd()
        self.timeout_s = server.timeout_s
        self._lock = asyncio.Lock()
        self._live: _Connection | None = None
        self._closed = False

    def __repr__(self) -> str:
        return f"<Upstream {self.server.name} {self.where}>"

    @property
    def where(self) -> str:
        """The upstream's program, or its URL without credentials or query, for messages (which
        may be journaled: arguments and tokens stay out)."""
        if self.server.url is not None:
            url = urlsplit(self.server.url)
            return f"{url.scheme}://{url.hostname}{f':{url.port}' if url.port else ''}{url.path}"
        program, *args = self.server.command or ["?"]
        return f"{program} …" if args else program

    async def __aenter__(self) -> Upstream:
        self._closed = False
        await self._connection()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the session (a stdio upstream's process ends with it)."""
        async with self._lock:
            self._closed = True
            live, self._live = self._live, None
        if live is not None:
            await live.close()

    async def list_tools(self) -> list[Tool]:
        """Every tool the upstream offers (all pages)."""
        client = await self._connection()
        tools: list[Tool] = []
        cursor: str | None = None
        try:
            while True:
                async with asyncio.timeout(self.timeout_s):
                    page = await client.list_tools(cursor=cursor, cache_mode="refresh")
                tools.extend(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    return tools
        except (MCPError, TimeoutError, OSError, httpx2.HTTPError, ValidationError) as exc:
            raise UpstreamUnavailable(
                f"MCP upstream {self.server.name!r} ({self.where}) did not list its tools: "
                f"{_describe(exc)}"
            ) from None

    async def call(self, name: str, arguments: Mapping[str, Any]) -> CallOutcome:
        """Call the tool ``name``; :class:`UpstreamToolError` when the call failed, whoever says
        so (the result's ``isError``, the protocol, the connection, the clock)."""
        result = await self.call_raw(name, arguments)
        if result.is_error:
            raise UpstreamReported(
                f"MCP upstream {self.server.name!r}: {name} reported an error: {error_text(result)}"
            )
        return CallOutcome(result)

    async def call_raw(self, name: str, arguments: Mapping[str, Any]) -> CallToolResult:
        """Call the tool ``name`` and return its result as it is, ``isError`` included;
        :class:`UpstreamToolError` when there is no result."""
        client = await self._connection()
        what = f"MCP upstream {self.server.name!r} ({self.where}): {name}"
        try:
            return await client.call_tool(
                name, dict(arguments), read_timeout_seconds=self.timeout_s
            )
        except MCPError as exc:
            if exc.code == REQUEST_TIMEOUT:
                raise UpstreamToolError(
                    f"{what} did not answer within {self.timeout_s:g}s; whether it took effect "
                    "is unknown"
                ) from None
            if exc.code == CONNECTION_CLOSED:
                raise UpstreamToolError(
                    f"{what}: the connection broke during the call; whether it took effect is "
                    "unknown"
                ) from None
            raise UpstreamReported(
                f"{what} was answered with protocol error {exc.code}: {exc.error.message}"
            ) from None
        except (
            OSError,
            httpx2.HTTPError,
            ValidationError,
            anyio.ClosedResourceError,
            anyio.BrokenResourceError,
        ) as exc:
            raise UpstreamToolError(
                f"{what} failed mid-call ({_describe(exc)}); whether it took effect is unknown"
            ) from None

    async def _connection(self) -> Client:
        """The open session, reopened first when it is closed (nothing of a call has been sent
        then); :class:`UpstreamUnavailable` when it cannot be opened."""
        async with self._lock:
            if self._closed:
                raise UpstreamUnavailable(
                    f"MCP upstream {self.server.name!r}: the session is closed"
                )
            live = self._live
            if live is not None and live.open:
                return live.client
            if live is not None:
                log.warning(
                    "MCP upstream %s (%s): the connection closed; reconnecting",
                    self.server.name,
                    self.where,
                )
                self._live = None
                await live.close()
            self._live = await _Connection.start(self._target(), self.timeout_s, self._describe)
            return self._live.client

    def _describe(self, exc: BaseException) -> str:
        return f"cannot reach MCP upstream {self.server.name!r} ({self.where}): {_describe(exc)}"

    def _target(self) -> StdioServerParameters | str:
        if self.server.url is not None:
            return self.server.url
        command = self.server.command or []
        cwd = self.folder / self.server.cwd if self.server.cwd else self.folder
        return StdioServerParameters(
            command=command[0], args=command[1:], env=dict(self.server.env) or None, cwd=cwd
        )


class _Connection:
    """One client session, held open by a task of its own: the mcp client's task groups must be
    entered and left by one task, and a transport that fails must not cancel a caller."""

    def __init__(self, client: Client, task: asyncio.Task[None], stop: asyncio.Event) -> None:
        self.client = client
        self._task = task
        self._stop = stop

    @classmethod
    async def start(
        cls,
        target: StdioServerParameters | str,
        timeout_s: float,
        describe: Callable[[BaseException], str],
    ) -> _Connection:
        ready: asyncio.Future[Client] = asyncio.get_running_loop().create_future()
        stop = asyncio.Event()

        async def hold() -> None:
            try:
                async with Client(target, read_timeout_seconds=timeout_s) as client:
                    ready.set_result(client)
                    await stop.wait()
            except BaseException as exc:  # the connection failed to open, or broke later
                if not ready.done():
                    ready.set_exception(exc)
                elif not isinstance(exc, asyncio.CancelledError):
                    log.info("MCP upstream session ended: %s", _describe(exc))

        task = asyncio.create_task(hold(), name="sagacity-mcp-upstream")
        try:
            async with asyncio.timeout(timeout_s):
                client = await asyncio.shield(ready)
        except Exception as exc:
            stop.set()
            task.cancel()
            await asyncio.wait([task])
            if isinstance(exc, TimeoutError):
                raise UpstreamUnavailable(
                    describe(TimeoutError(f"no answer within {timeout_s:g}s"))
                ) from None
            raise UpstreamUnavailable(describe(exc)) from None
        return cls(client, task, stop)

    @property
    def open(self) -> bool:
        """Whether a request sent now reaches the upstream's session (the mcp client has no
        public liveness check; ping is deprecated in the current protocol)."""
        if self._task.done():
            return False
        dispatcher = getattr(self.client.session, "_dispatcher", None)
        return not getattr(dispatcher, "_closed", False)

    async def close(self) -> None:
        self._stop.set()
        try:
            async with asyncio.timeout(_CLOSE_S):
                await asyncio.shield(self._task)
        except TimeoutError:
            self._task.cancel()
            await asyncio.wait([self._task])


def _describe(exc: BaseException) -> str:
    """The causes an exception (group) stands for, one line."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(dict.fromkeys(_describe(e) for e in exc.exceptions))
    if isinstance(exc, MCPError):
        return exc.error.message
    if isinstance(exc, FileNotFoundError):
        return f"command not found ({exc.filename or exc})"
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
