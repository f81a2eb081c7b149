"""An ASGI app served over real HTTP on localhost, in the test's event loop: for browser tests and
for clients that speak HTTP themselves (schemathesis's)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator

import uvicorn
from starlette.types import ASGIApp


@contextlib.asynccontextmanager
async def serve(app: ASGIApp, host: str = "127.0.0.1") -> AsyncIterator[str]:
    """Serve ``app`` on ``host`` on a free port in this event loop, as ``sagacity approvals
    serve`` configures uvicorn (its defaults otherwise); yield its base URL.

    The socket is bound here and handed to uvicorn, so no other process can take the port between
    choosing it and serving on it.
    """
    sock = socket.socket()
    sock.bind((host, 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("uvicorn stopped before it started serving")
            await asyncio.sleep(0.01)
        yield f"http://{host}:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
