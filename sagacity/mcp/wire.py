"""What the MCP gateway takes off the wire: JSON-RPC in strict JSON, or a refusal that says why.

Python's ``json`` and the MCP library read more than JSON: ``NaN`` and ``Infinity`` (a tool would
get ``null`` in their place), numbers beyond a double's range (infinity), and lone surrogates
(``"\\ud800"``: valid escapes, but not Unicode text); and the stdio reader used to replace bytes
that are not UTF-8 with U+FFFD. A call carrying any of them would run with arguments other than
those its client sent, so each such message is refused before the MCP library reads it:

* a request whose envelope is sound and only its params cannot be read: ``-32602`` Invalid
  params, with the request's id, naming where and what;
* anything else (the id or method unreadable, undecodable bytes outside a string): ``-32700``
  Parse error, id null;
* a notification or a response: over stdio nothing (JSON-RPC answers neither), over HTTP a 400.

Nothing refused reaches the gateway, so nothing is started, journaled or run for it. Also here:
the reason given for a request sent before ``initialize``, which the MCP library refuses with
only "Invalid request parameters".
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass
from typing import Any

import mcp_types as types
from mcp.server import ServerRequestContext
from mcp.server.context import CallNext, HandlerResult
from mcp.shared.exceptions import MCPError
from starlette.types import ASGIApp, Receive, Scope, Send

from sagacity.asgi import read_body, replaying

__all__ = [
    "Refusal",
    "explain_uninitialized",
    "jsonrpc_error",
    "refusal",
    "strict_http",
    "usable_id",
]

log = logging.getLogger("sagacity.mcp.gateway")

#: the MCP library's refusal of a request before ``initialize`` (it pins this shape for compat)
_NOT_INITIALIZED = types.ErrorData(
    code=types.INVALID_PARAMS, message="Invalid request parameters", data=""
)


@dataclass(frozen=True)
class Refusal:
    """Why a message is refused, as a JSON-RPC error (its id null unless the request's was read)."""

    error: types.JSONRPCError
    #: a request, which JSON-RPC answers; notifications and responses get no answer
    request: bool

    @property
    def reason(self) -> str:
        return self.error.error.message


@dataclass(frozen=True)
class _NotJson:
    """A literal Python's parser takes that JSON has no value for (``NaN``, ``1e400``)."""

    literal: str


def _constant(name: str) -> _NotJson:
    return _NotJson(name)


def _float(literal: str) -> float | _NotJson:
    value = float(literal)
    return value if math.isfinite(value) else _NotJson(literal)


def refusal(raw: bytes) -> Refusal | None:
    """The refusal of the message ``raw`` (one JSON-RPC message, as sent); None when it is strict
    JSON, or not JSON at all (the transport's own parse error answers that)."""
    undecodable = None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        # each bad byte becomes a lone surrogate, found below where it stands
        text = raw.decode("utf-8", "surrogateescape")
        undecodable = f"not UTF-8 text (byte {raw[exc.start]:#04x} at offset {exc.start})"
    try:
        message = json.loads(text, parse_constant=_constant, parse_float=_float)
    except (ValueError, RecursionError):
        if undecodable is None:
            return None
        return Refusal(jsonrpc_error(None, types.PARSE_ERROR, f"Parse error: {undecodable}"), True)
    found = _first_problem(message)
    if found is None:
        return None
    path, problem = found
    if undecodable is not None and "lone surrogate" in problem:
        problem = undecodable  # the bad bytes, as they stood in the text
    if not isinstance(message, dict):
        return Refusal(jsonrpc_error(None, types.PARSE_ERROR, f"Parse error: {problem}"), True)
    request = "method" in message and "id" in message
    if request and path[:1] == ("params",) and len(path) > 1:
        where = ".".join(str(part) for part in path[1:])
        said = f"Invalid params: {where}: {problem}; the request was refused, nothing was run"
        return Refusal(jsonrpc_error(usable_id(message["id"]), types.INVALID_PARAMS, said), True)
    where = ".".join(str(part) for part in path) or "the message"
    return Refusal(
        jsonrpc_error(None, types.PARSE_ERROR, f"Parse error: {where}: {problem}"), request
    )


def _first_problem(value: Any) -> tuple[tuple[str | int, ...], str] | None:
    """Where in parsed ``value`` the first thing JSON cannot carry is, and what it is."""
    stack: list[tuple[Any, tuple[str | int, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, _NotJson):
            return path, f"{item.literal} is not a JSON number"
        if isinstance(item, str):
            bad = _surrogate(item)
            if bad is not None:
                return path, bad
        elif isinstance(item, dict):
            for key, child in item.items():
                bad = _surrogate(key)
                if bad is not None:
                    return (*path, ascii(key)), bad
                stack.append((child, (*path, key)))
        elif isinstance(item, list):
            stack.extend((child, (*path, i)) for i, child in enumerate(item))
    return None


def _surrogate(text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"{text[exc.start]!a} is a lone surrogate, not Unicode text"
    return None


def usable_id(value: object) -> int | str | None:
    """``value`` as the id of an answer; None (``"id": null``) when it cannot be one."""
    if isinstance(value, bool) or not isinstance(value, int | str) or _surrogate(str(value)):
        return None
    return value


def jsonrpc_error(request_id: int | str | None, code: int, message: str) -> types.JSONRPCError:
    return types.JSONRPCError(
        jsonrpc="2.0", id=request_id, error=types.ErrorData(code=code, message=message)
    )


def strict_http(app: ASGIApp) -> ASGIApp:
    """``app`` (an MCP streamable HTTP app) behind :func:`refusal`: a POST whose body it refuses
    is answered 400 with the JSON-RPC error, and never reaches ``app``."""

    async def checked(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await app(scope, receive, send)
            return
        body = await read_body(receive)
        if body is None:
            return  # the client left
        refused = refusal(body)
        if refused is not None:
            log.warning("refused an HTTP message it cannot read: %s", refused.reason)
            text = refused.error.model_dump_json(by_alias=True, exclude_unset=True).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 400,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(text)).encode()),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": text})
            return
        await app(scope, replaying(body, receive), send)

    return checked


async def explain_uninitialized(
    ctx: ServerRequestContext[Any], call_next: CallNext
) -> HandlerResult:
    """Server middleware: a request refused because it came before ``initialize`` says so."""
    try:
        return await call_next(ctx)
    except MCPError as exc:
        if exc.error != _NOT_INITIALIZED or ctx.session.client_params is not None:
            raise
        raise MCPError(
            types.INVALID_PARAMS,
            f"{ctx.method} refused: this MCP session is not initialized. Send initialize, then "
            "notifications/initialized, before any other request (ping excepted)",
        ) from None
