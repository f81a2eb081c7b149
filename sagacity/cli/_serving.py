"""Serving an ASGI app under uvicorn until SIGINT or SIGTERM, then returning normally."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Iterator

import uvicorn

__all__ = ["Server"]


class Server(uvicorn.Server):
    """A uvicorn server that stops on SIGINT or SIGTERM and returns, exit status 0.

    uvicorn re-raises the stopping signal once it has shut down, which would kill the process
    before the caller's cleanup runs (a pool closing, say); this stops the same way, then returns.
    """

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, self.handle_exit, sig, None)
        try:
            yield
        finally:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.remove_signal_handler(sig)
