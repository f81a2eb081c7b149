"""Whole request bodies for ASGI middleware: read one (bounded), then hand it on as one message."""

from __future__ import annotations

from starlette.types import Message, Receive

__all__ = ["BodyTooLarge", "read_body", "replaying"]


class BodyTooLarge(Exception):
    """The body went past the bound before its end."""


async def read_body(receive: Receive, max_body: int | None = None) -> bytes | None:
    """The request's whole body; None when the client left before its end."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += message.get("body", b"")
        if max_body is not None and len(body) > max_body:
            raise BodyTooLarge
        if not message.get("more_body", False):
            return bytes(body)


def replaying(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that gives the app ``body`` whole, then whatever the client sends next (a
    disconnect), so nothing downstream reads the body twice."""
    replayed = False

    async def replay() -> Message:
        nonlocal replayed
        if replayed:
            return await receive()
        replayed = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay
