"""Helpers of the adversarial MCP tests (``test_attacks.py``): policies that are hostile or
just odd, and a wait for a saga's journal to reach a state."""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path
from typing import Any

from sagacity.store import JournalStore
from tests.mcp.gateway_fixtures import REPO, SAGACITY, McpStack, policy_text
from tests.temporal.conftest import phases


def yaml_bomb_policy(folder: Path, levels: int = 12) -> Path:
    """A reviewed policy of under 1 KB whose ``constants`` expand to ``10**levels`` strings
    through YAML aliases (the "billion laughs")."""
    lines = ["        l0: &a0 [z, z, z, z, z, z, z, z, z, z]"]
    for i in range(1, levels):
        ref = f"*a{i - 1}"
        lines.append(f"        l{i}: &a{i} [{', '.join([ref] * 10)}]")
    text = (
        "version: 1\n"
        "reviewed: true\n"
        "server: {name: tickets, command: [python, ticket_server.py]}\n"
        "tools:\n"
        "  create_ticket:\n"
        "    reversibility: REVERSIBLE\n"
        "    compensation:\n"
        "      tool: close_ticket\n"
        "      arguments: {ticket_id: result.id}\n"
        "      constants:\n" + "\n".join(lines) + "\n"
    )
    path = folder / "bomb.policy.yaml"
    path.write_text(text)
    return path


def gateway_policy(stack: McpStack, name: str, **session: object) -> Path:
    """``stack.write_policy`` with session values written as given (``.inf``, ``0.05``)."""
    path = stack.folder / f"{name}.policy.yaml"
    path.write_text(policy_text(stack.state, **session))  # type: ignore[arg-type]
    return path


async def wait_for_phase(
    journal: JournalStore, saga_id: str, row: tuple[str, str], timeout: float = 60
) -> list[tuple[str, str]]:
    """The saga's journal once it holds ``row`` (``(tool, phase)``)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        rows = await phases(journal, saga_id)
        if row in rows or asyncio.get_running_loop().time() > deadline:
            return rows
        await asyncio.sleep(0.2)


#: the prober's ``initialize`` (id 1)
HELLO = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "prober", "version": "0"},
    },
}


async def raw_stdio(
    stack: McpStack,
    policy: Path,
    lines: list[bytes],
    then: list[bytes] = [],  # noqa: B006 - read, never changed
    timeout: float = 30,
    *,
    hello: bool = True,
) -> list[dict[str, Any]]:
    """Speak JSON-RPC to ``sagacity mcp`` over stdio byte for byte, as a prober would (no MCP
    client to tidy the input): initialize (unless not ``hello``), then ``lines`` at once, then
    each of ``then`` once the request before it is answered (ids from 2, in that order); the
    answers to the requests with an id, in order, once each has come or ``timeout`` passed."""
    log = (stack.folder / "prober.log").open("ab")
    proc = await asyncio.create_subprocess_exec(
        SAGACITY,
        "mcp",
        "--policy",
        str(policy),
        cwd=REPO,
        env=stack.env(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=log,
    )
    log.close()  # the child holds its own copy
    assert proc.stdin is not None and proc.stdout is not None
    stdin = proc.stdin
    answers: dict[Any, dict[str, Any]] = {}
    wanted: set[Any] = {2 + n for n in range(len(lines) + len(then))}
    answered = {n: asyncio.Event() for n in wanted}

    async def send() -> None:
        # beside the reading: a gateway blocked on a full stdout must not block us in turn
        if hello:
            stdin.write(json.dumps(HELLO).encode() + b"\n")
            stdin.write(b'{"jsonrpc": "2.0", "method": "notifications/initialized"}\n')
        for line in lines:
            stdin.write(line.rstrip(b"\n") + b"\n")
            await stdin.drain()
        for n, line in enumerate(then, start=len(lines) + 2):
            # concurrent requests have no order in JSON-RPC: a rollback sent beside a call may
            # be taken first
            await answered[n - 1].wait()
            stdin.write(line.rstrip(b"\n") + b"\n")
            await stdin.drain()

    sending = asyncio.create_task(send())
    try:
        async with asyncio.timeout(timeout):
            while not wanted <= answers.keys():
                raw = await proc.stdout.readline()
                if not raw:
                    break
                with contextlib.suppress(ValueError):
                    message = json.loads(raw)
                    if isinstance(message, dict) and "id" in message:
                        answers[message["id"]] = message
                        if message["id"] in answered:
                            answered[message["id"]].set()
    except TimeoutError:
        pass
    finally:
        sending.cancel()
        proc.stdin.close()
        try:
            await asyncio.wait_for(proc.wait(), 20)
        except TimeoutError:
            proc.kill()
            await proc.wait()
    return [answers.get(n, {"missing": True}) for n in sorted(wanted)] + [
        answers.get(None, {"missing": True})
    ]


def tool_call(n: int, name: str, arguments: Any) -> bytes:
    """A ``tools/call`` request ``n`` as JSON text (``ensure_ascii``: a lone surrogate is sent
    as its ``\\ud800`` escape, which is valid JSON text)."""
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
    ).encode()
