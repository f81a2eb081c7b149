"""The gateway refuses a tool call it cannot read exactly as sent, over stdio and HTTP.

Bytes that are not UTF-8, lone surrogates, ``NaN``, ``Infinity`` and numbers beyond a double's
range are what Python's JSON reader takes and JSON does not carry: the call must be refused with
a JSON-RPC error naming what and where (``-32602`` with the request's id), and nothing run or
journaled for it; the session goes on, and the next call runs alone in its saga.
"""

from __future__ import annotations

import json
from typing import Any

import httpx

from sagacity.store import JournalStore
from tests.mcp.attack_fixtures import HELLO, raw_stdio, tool_call
from tests.mcp.gateway_fixtures import McpStack, calls, http_gateway, mcp_stack, saga_named
from tests.temporal.conftest import journal, phases, pool

__all__ = ["journal", "mcp_stack", "pool"]  # the fixtures, imported for pytest


def _with(literal: bytes) -> bytes:
    """A create_ticket call whose title is ``literal``, as raw JSON text."""
    return tool_call(0, "create_ticket", {"title": "TITLE"}).replace(b'"TITLE"', literal)


#: (what the refusal names, the call's title as raw JSON text)
UNREADABLE: list[tuple[str, bytes]] = [
    ("not UTF-8 text (byte 0xe9", b'"caf\xe9"'),
    ("not UTF-8 text (byte 0xed", b'"\xed\xa0\x80"'),  # a surrogate encoded as UTF-8
    ("'\\ud800' is a lone surrogate", b'"\\ud800"'),
    ("NaN is not a JSON number", b"NaN"),
    ("Infinity is not a JSON number", b"-Infinity"),
    ("1e400 is not a JSON number", b"1e400"),
]


def numbered(raw: bytes, n: int) -> bytes:
    return raw.replace(b'"id": 0', f'"id": {n}'.encode(), 1)


def assert_refused(answer: dict[str, Any], n: int, said: str) -> None:
    assert answer.get("id") == n and "error" in answer, json.dumps(answer)[:500]
    error = answer["error"]
    assert error["code"] == -32602, error
    assert "arguments.title" in error["message"] and said in error["message"], error
    assert "nothing was run" in error["message"], error


async def assert_ran_alone(stack: McpStack, journal: JournalStore, saga_id: str) -> None:
    """Only the plain call reached the upstream and the saga's journal."""
    titles = [c["title"] for c in calls(stack.state, "create_ticket")]
    assert titles.count("plain") >= 1 and not [t for t in titles if t != "plain"], titles
    rows = await phases(journal, saga_id)
    assert [r for r in rows if r[1] == "INTENT"] == [("create_ticket", "INTENT")], rows


async def test_over_stdio_an_unreadable_call_is_refused_and_nothing_runs(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("undecodable-stdio")
    bad = [numbered(_with(literal), 2 + i) for i, (_, literal) in enumerate(UNREADABLE)]
    plain = len(bad) + 2
    answers = await raw_stdio(
        mcp_stack,
        policy,
        [*bad, tool_call(plain, "create_ticket", {"title": "plain"})],
        then=[tool_call(plain + 1, "commit", {})],
        timeout=60,
    )
    for i, (said, _) in enumerate(UNREADABLE):
        assert_refused(answers[i], 2 + i, said)
    ran, committed = answers[len(bad)], answers[len(bad) + 1]
    assert ran["result"]["structuredContent"]["title"] == "plain", str(ran)[:500]
    await assert_ran_alone(mcp_stack, journal, saga_named(json.dumps(committed)))


def answer_of(response: httpx.Response) -> dict[str, Any]:
    """The JSON-RPC message of a response, sent as JSON or as one server-sent event."""
    if response.headers["content-type"].startswith("application/json"):
        message: dict[str, Any] = response.json()
        return message
    data = [line for line in response.text.splitlines() if line.startswith("data: ")]
    message = json.loads(data[-1][len("data: ") :])
    return message


async def test_over_http_an_unreadable_call_is_refused_and_nothing_runs(
    mcp_stack: McpStack, journal: JournalStore
) -> None:
    policy = mcp_stack.write_policy("undecodable-http")
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    with http_gateway(mcp_stack, policy) as gateway:
        async with httpx.AsyncClient(timeout=60) as client:
            hello = await client.post(gateway.url, headers=headers, json=HELLO)
            headers["mcp-session-id"] = hello.headers["mcp-session-id"]
            initialized = b'{"jsonrpc": "2.0", "method": "notifications/initialized"}'
            await client.post(gateway.url, headers=headers, content=initialized)
            for i, (said, literal) in enumerate(UNREADABLE):
                sent = numbered(_with(literal), 2 + i)
                refused = await client.post(gateway.url, headers=headers, content=sent)
                assert refused.status_code == 400, refused.text[:500]
                assert_refused(answer_of(refused), 2 + i, said)
            plain = tool_call(90, "create_ticket", {"title": "plain"})
            ran = answer_of(await client.post(gateway.url, headers=headers, content=plain))
            assert ran["result"]["structuredContent"]["title"] == "plain", str(ran)[:500]
            commit = tool_call(91, "commit", {})
            committed = answer_of(await client.post(gateway.url, headers=headers, content=commit))
            await client.delete(gateway.url, headers=headers)
    assert "Traceback" not in gateway.log.read_text()
    await assert_ran_alone(mcp_stack, journal, saga_named(json.dumps(committed)))
