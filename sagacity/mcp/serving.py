"""The gateway over streamable HTTP: strict input, and a shutdown that ends the MCP sessions first.

uvicorn's shutdown waits for open requests before it ends the app's lifespan; but an MCP
client's event stream, or a call waiting for a human's approval, stays open until the MCP session
manager (the app's lifespan) ends its sessions. Waited out, they would hold the shutdown; cut
off, each would be logged as a failed request with its traceback, and a serving task cancelled
from outside logs the lifespan's. So the sessions end first (:class:`_SessionsFirst`), their
requests finish, and uvicorn's own shutdown follows with nothing left open.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator

import uvicorn
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagacity.mcp.wire import strict_http

__all__ = ["serve_http"]

#: how long a request still open once the sessions ended may take before it is cut off
_GRACE_S = 10


async def serve_http(app: ASGIApp, host: str, port: int) -> None:
    """Serve ``app`` (an MCP streamable HTTP app) until cancelled, then shut down cleanly."""

    class Quiet(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            yield  # the caller's SIGTERM and SIGINT cancel this coroutine instead

    sessions_first = _SessionsFirst(strict_http(app))
    server = Quiet(
        uvicorn.Config(
            sessions_first,
            host=host,
            port=port,
            log_level="warning",
            timeout_graceful_shutdown=_GRACE_S,
        )
    )
    serving = asyncio.ensure_future(server.serve())
    try:
        await asyncio.shield(serving)
    except asyncio.CancelledError:
        sessions_first.end_sessions()
        server.should_exit = True
        await serving
        raise


class _SessionsFirst:
    """``app`` whose lifespan can be ended before uvicorn asks (:meth:`end_sessions`); uvicorn is
    told it ended once it asks."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._ending = asyncio.Event()

    def end_sessions(self) -> None:
        self._ending.set()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "lifespan":
            await self.app(scope, receive, send)
            return
        asked: asyncio.Future[Message] | None = None
        started = False

        async def lifespan_receive() -> Message:
            nonlocal asked, started
            if not started:  # the startup message, as uvicorn sends it
                started = True
                return await receive()
            asked = asyncio.ensure_future(receive())
            ending = asyncio.ensure_future(self._ending.wait())
            await asyncio.wait({asked, ending}, return_when=asyncio.FIRST_COMPLETED)
            ending.cancel()
            return {"type": "lifespan.shutdown"}

        async def lifespan_send(message: Message) -> None:
            if message["type"].startswith("lifespan.shutdown") and asked is not None:
                await asked  # uvicorn expects the answer only once it has asked
            await send(message)

        await self.app(scope, lifespan_receive, lifespan_send)
