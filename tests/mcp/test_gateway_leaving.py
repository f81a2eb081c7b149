"""The gateway's words at the edges of a session: a request before ``initialize`` is told why it
is refused; a client that leaves mid-call, or a gateway stopped with calls in flight, ends
without a traceback in the log (over stdio and HTTP), and a stopped gateway exits 0 at once; a
method its HTTP transport does not take is a 405 naming those it does."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path

import httpx
import pytest

from tests.mcp.attack_fixtures import HELLO, raw_stdio, tool_call
from tests.mcp.gateway_fixtures import REPO, SAGACITY, McpStack, calls, http_gateway, mcp_stack

__all__ = ["mcp_stack"]  # the fixture, imported for pytest

INITIALIZED = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
WAITS = "waits for a human's approval"


def send_email(n: int) -> bytes:
    return tool_call(n, "send_email", {"to": "x@example.com", "body": f"mail {n}"})


async def logged(log: Path, words: str, times: int = 1, timeout: float = 90) -> None:
    """Wait until ``words`` is in the log ``times`` times."""
    deadline = asyncio.get_running_loop().time() + timeout
    while log.read_text(errors="replace").count(words) < times:
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError(f"{words!r} not logged {times}x: {log.read_text()[-2000:]}")
        await asyncio.sleep(0.2)


def assert_quiet(log: Path) -> None:
    text = log.read_text(errors="replace")
    assert "Traceback" not in text and " ERROR " not in text, text[-3000:]


async def test_a_request_before_initialize_is_told_why(mcp_stack: McpStack) -> None:
    policy = mcp_stack.write_policy("before-initialize")
    (refused, _) = await raw_stdio(
        mcp_stack, policy, [tool_call(2, "list_tickets", {})], hello=False, timeout=60
    )
    error = refused["error"]
    assert "not initialized" in error["message"] and "initialize" in error["message"], error
    assert calls(mcp_stack.state, "list_tickets") == []


@pytest.mark.parametrize("leaving", ["stdin closed", "SIGTERM"])
async def test_a_stdio_gateway_left_mid_call_ends_cleanly(
    mcp_stack: McpStack, leaving: str
) -> None:
    policy = mcp_stack.write_policy(f"leaving-{leaving[:5]}")
    log = mcp_stack.folder / f"leaving-{leaving[:5]}.log"
    with log.open("wb") as stderr:
        proc = await asyncio.create_subprocess_exec(
            SAGACITY,
            "mcp",
            "--policy",
            str(policy),
            cwd=REPO,
            env=mcp_stack.env(),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=stderr,
        )
    assert proc.stdin is not None
    try:
        proc.stdin.write(json.dumps(HELLO).encode() + b"\n" + INITIALIZED + b"\n")
        proc.stdin.write(send_email(2) + b"\n")
        await proc.stdin.drain()
        await logged(log, WAITS)
        if leaving == "SIGTERM":
            proc.send_signal(signal.SIGTERM)  # stdin stays open: a client that sends nothing
        else:
            proc.stdin.close()
        assert await asyncio.wait_for(proc.wait(), 30) == 0
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert "ended: the MCP session closed" in log.read_text()
    assert_quiet(log)


async def test_an_http_gateway_left_mid_call_and_stopped_ends_cleanly(
    mcp_stack: McpStack,
) -> None:
    policy = mcp_stack.write_policy("leaving-http")
    accept = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with http_gateway(mcp_stack, policy) as gateway:
        async with httpx.AsyncClient(timeout=120) as client:

            async def session() -> dict[str, str]:
                hello = await client.post(gateway.url, headers=accept, json=HELLO)
                headers = {**accept, "mcp-session-id": hello.headers["mcp-session-id"]}
                await client.post(gateway.url, headers=headers, content=INITIALIZED)
                return headers

            # one client leaves while its call waits for approval
            left = asyncio.create_task(
                client.post(gateway.url, headers=await session(), content=send_email(2))
            )
            await logged(gateway.log, WAITS)
            left.cancel()
            # another's call is still waiting when the gateway is stopped
            waiting = asyncio.create_task(
                client.post(gateway.url, headers=await session(), content=send_email(3))
            )
            await logged(gateway.log, WAITS, times=2)
            gateway.proc.terminate()
            assert await asyncio.to_thread(gateway.proc.wait, 30) == 0
            await asyncio.gather(left, waiting, return_exceptions=True)
    assert gateway.log.read_text().count("ended: the MCP session closed") == 2
    assert_quiet(gateway.log)


async def test_a_method_the_http_gateway_does_not_take_is_405_with_allow(
    mcp_stack: McpStack,
) -> None:
    policy = mcp_stack.write_policy("methods-http")
    with http_gateway(mcp_stack, policy) as gateway:
        async with httpx.AsyncClient(timeout=30) as client:
            for method in ("PUT", "PATCH"):
                answer = await client.request(method, gateway.url)
                assert answer.status_code == 405, (method, answer.status_code)
                assert "POST" in answer.headers.get("allow", ""), answer.headers
