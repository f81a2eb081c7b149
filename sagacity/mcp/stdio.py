"""MCP over stdio that answers every line it cannot read.

The MCP library's ``stdio_server`` hands such a line to the server as an exception, which nothing
answers: a client whose request is unreadable would wait forever. Here its input is checked first,
and each unreadable request gets a JSON-RPC error through the library's own writer (the one task
that writes stdout, so answers never tear), while the library still diverts fd 1. A line that is
JSON only to Python's lenient reader (bytes that are not UTF-8, ``NaN``, lone surrogates) is
refused too (:mod:`.wire`), never run with its bytes replaced.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import anyio
import mcp_types as types
from mcp.server.stdio import stdio_server
from mcp.shared.message import SessionMessage
from pydantic import ValidationError

from sagacity.mcp.wire import jsonrpc_error, refusal, usable_id

__all__ = ["serve_stdio"]

log = logging.getLogger(__name__)


async def serve_stdio(server: Any) -> None:
    """Run ``server`` (a low-level MCP server) over stdin and stdout until stdin ends."""
    with _wire_input() as wire:
        lines = _CheckedLines(wire)
        async with stdio_server(stdin=lines) as (read, write):
            lines.answer_with(write.send)
            await server.run(read, write, server.create_initialization_options())


@contextmanager
def _wire_input() -> Iterator[TextIO]:
    """The client's stdin on a private descriptor, fd 0 reading the null device meanwhile: a
    handler or child that reads stdin cannot take the client's bytes (``stdio_server`` does so
    only for a stdin it opens itself)."""
    wire = fcntl.fcntl(0, fcntl.F_DUPFD_CLOEXEC, 3)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    try:
        # never closed: a worker thread can still be blocked reading it when serving ends
        # bytes that are not UTF-8 kept as they came (as lone surrogates), for refusal() to refuse
        yield open(wire, encoding="utf-8", errors="surrogateescape", closefd=False)  # noqa: SIM115
    finally:
        os.dup2(wire, 0)


class _CheckedLines(anyio.AsyncFile[str]):
    """The client's lines that the MCP library can read; every other one is answered here."""

    def __init__(self, wire: TextIO) -> None:
        super().__init__(wire)
        self._send: Callable[[SessionMessage], Awaitable[None]] | None = None
        self._writing = anyio.Event()

    def answer_with(self, send: Callable[[SessionMessage], Awaitable[None]]) -> None:
        """Answer through ``send`` (the transport's writer exists only once it has started)."""
        self._send = send
        self._writing.set()

    async def readline(self) -> str:
        while True:
            # abandoned when serving is cancelled (SIGTERM): a read blocked on a client that
            # sends nothing must not hold the gateway's shutdown
            line = await anyio.to_thread.run_sync(self.wrapped.readline, abandon_on_cancel=True)
            if not line:
                return line  # end of input
            refused = refusal(line.encode("utf-8", "surrogateescape"))
            if refused is not None:
                log.warning("refused a line it cannot read: %s", refused.reason)
                if refused.request:
                    await self._answer(refused.error)
                continue
            try:
                types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                return line
            except ValidationError:
                pass
            if not line.strip():
                continue  # a blank line is no message
            answer = _refusal(line)
            if answer is None:
                log.warning(
                    "ignored an unreadable notification or response (JSON-RPC answers neither)"
                )
                continue
            log.warning("answered a line it cannot read: %s", answer.error.message)
            await self._answer(answer)

    async def _answer(self, error: types.JSONRPCError) -> None:
        await self._writing.wait()
        assert self._send is not None
        await self._send(SessionMessage(error))


def _refusal(line: str) -> types.JSONRPCError | None:
    """JSON-RPC's answer to ``line``, which the MCP library cannot read; None when none is due."""
    try:
        message = json.loads(line.rstrip("\n"))
    except RecursionError:  # the stdlib parser's depth guard
        return jsonrpc_error(None, types.PARSE_ERROR, "Parse error: nested too deeply")
    except ValueError as exc:
        return jsonrpc_error(None, types.PARSE_ERROR, f"Parse error: {exc}")
    if not isinstance(message, dict):
        return jsonrpc_error(None, types.INVALID_REQUEST, "Invalid Request: not a JSON object")
    if "result" in message or "error" in message or ("method" in message and "id" not in message):
        return None  # a response or a notification
    request_id = usable_id(message.get("id"))
    envelope = {key: value for key, value in message.items() if key != "params"}
    problem = _problem(json.dumps(envelope))
    if problem is not None:
        return jsonrpc_error(request_id, types.INVALID_REQUEST, f"Invalid Request: {problem}")
    # a sound request whose params cannot be read (a lone surrogate, too deep, not an object):
    # JSON-RPC 2.0 names that -32602 Invalid params; -32600 is for the request object itself
    return jsonrpc_error(request_id, types.INVALID_PARAMS, f"Invalid params: {_problem(line)}")


def _problem(text: str) -> str | None:
    """What the MCP library finds wrong with ``text`` as a JSON-RPC request, in its words."""
    try:
        types.JSONRPCRequest.model_validate_json(text, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return f"{where}: {first['msg']}" if where else first["msg"]
    return None
