"""A ticket desk as an MCP server, the upstream of the MCP tests: ``python -m
tests.mcp.ticket_server --state FILE [--http PORT]`` (stdio without ``--http``).

Tools: ``create_ticket(title, priority=0) -> {id, title, status}`` (structured output; a
priority is logged only when given, so the approval rule tests have a number to judge), ``close_ticket(
ticket_id, reason?)``, ``send_email(to, body)`` (appends to an outbox), ``list_tickets()``,
``describe_ticket(ticket_id)`` (plain, non-JSON text), ``ticket_history(ticket_id, padding)``
(text as long as asked) and ``ticket_badge(ticket_id)`` (an image).

Its whole state (tickets, outbox, and a log of every call with its tool and arguments) is the
JSON file ``--state``, written atomically under a file lock, so a test reads the upstream's own
account of what happened, and a restarted server (or a second one) carries on from it.

Titles that steer a test, each without any effect: ``fail`` answers ``isError: true``;
``hang`` never answers; ``crash`` ends the server process mid-call (the first time it is seen in
the state file; later a ``crash`` ticket is created like any other, as a retry would find).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import fcntl
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypedDict

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.utilities.types import Image

#: a 1x1 PNG, the badge of every ticket
_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)


class Ticket(TypedDict):
    id: str
    title: str
    status: str


class Closed(TypedDict):
    id: str
    status: str
    reason: str


class Sent(TypedDict):
    message_id: str


class Tickets(TypedDict):
    tickets: list[Ticket]


def empty_state() -> dict[str, Any]:
    return {"tickets": {}, "outbox": [], "calls": [], "next_id": 1, "crashed": 0}


def read_state(path: Path) -> dict[str, Any]:
    """The server's state as last written (an empty desk when there is no file yet)."""
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        return empty_state()


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[dict[str, Any]]:
    """The state, held under the lock; written back atomically when the block ends cleanly."""
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        state = read_state(path)
        yield state
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
        with os.fdopen(fd, "w") as out:
            json.dump(state, out, indent=1)
        os.replace(tmp, path)


def build(state_file: Path) -> MCPServer:
    server = MCPServer("tickets", log_level="WARNING")

    def log(state: dict[str, Any], tool: str, arguments: dict[str, Any], ok: bool) -> None:
        state["calls"].append({"tool": tool, "arguments": arguments, "ok": ok, "pid": os.getpid()})

    async def steer(title: str) -> None:
        if title == "fail":
            with _locked(state_file) as state:
                log(state, "create_ticket", {"title": title}, False)
            raise ToolError("the desk refuses tickets titled 'fail'")
        if title == "hang":
            await asyncio.sleep(3600)
        if title == "crash":
            with _locked(state_file) as state:
                crashed = state.setdefault("crashed", 0)
                state["crashed"] += 1
            if not crashed:
                os._exit(3)

    @server.tool()
    async def create_ticket(title: str, priority: int = 0) -> Ticket:
        """Open a ticket; returns it with its new id."""
        await steer(title)
        with _locked(state_file) as state:
            ticket = Ticket(id=f"T-{state['next_id']}", title=title, status="open")
            state["next_id"] += 1
            state["tickets"][ticket["id"]] = ticket
            given = {"priority": priority} if priority else {}
            log(state, "create_ticket", {"title": title, **given}, True)
        return ticket

    @server.tool()
    def close_ticket(ticket_id: str, reason: str = "") -> Closed:
        """Close an open ticket."""
        with _locked(state_file) as state:
            ticket = state["tickets"].get(ticket_id)
            log(state, "close_ticket", {"ticket_id": ticket_id, "reason": reason}, bool(ticket))
            if ticket is None:
                raise ToolError(f"no ticket {ticket_id}")
            ticket["status"] = "closed"
        return Closed(id=ticket_id, status="closed", reason=reason)

    @server.tool()
    def send_email(to: str, body: str) -> Sent:
        """Send an email (it cannot be unsent)."""
        with _locked(state_file) as state:
            sent = Sent(message_id=f"M-{len(state['outbox']) + 1}")
            state["outbox"].append({"to": to, "body": body, **sent})
            log(state, "send_email", {"to": to, "body": body}, True)
        return sent

    @server.tool()
    def list_tickets() -> Tickets:
        """Every ticket, open and closed."""
        with _locked(state_file) as state:
            log(state, "list_tickets", {}, True)
            return Tickets(tickets=list(state["tickets"].values()))

    @server.tool(structured_output=False)
    def describe_ticket(ticket_id: str) -> str:
        """A ticket in words (plain text, not JSON)."""
        with _locked(state_file) as state:
            log(state, "describe_ticket", {"ticket_id": ticket_id}, True)
            ticket = state["tickets"].get(ticket_id)
        return (
            f"{ticket_id}: {ticket['title']} ({ticket['status']})" if ticket else "no such ticket"
        )

    @server.tool(structured_output=False)
    def ticket_history(ticket_id: str, padding: int = 0) -> str:
        """A ticket's history as text; ``padding`` characters of filler after it (big results)."""
        with _locked(state_file) as state:
            log(state, "ticket_history", {"ticket_id": ticket_id, "padding": padding}, True)
        return f"{ticket_id}: opened\n" + "." * padding

    @server.tool()
    def ticket_badge(ticket_id: str) -> Image:
        """A ticket's badge, as an image."""
        with _locked(state_file) as state:
            log(state, "ticket_badge", {"ticket_id": ticket_id}, True)
        return Image(data=_PNG, format="png")

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--state", type=Path, required=True, help="the JSON state file")
    parser.add_argument("--http", type=int, metavar="PORT", help="serve streamable HTTP on PORT")
    args = parser.parse_args()
    server = build(args.state.resolve())
    if args.http is None:
        server.run("stdio")
    else:
        server.run("streamable-http", host="127.0.0.1", port=args.http)


if __name__ == "__main__":
    main()
