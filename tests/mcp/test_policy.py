"""The policy file: every mistake a PolicyError naming the file, the key and its line; a policy
checked against the upstream's real tool list; observe mode's skeleton loads once reviewed."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mcp.types import Tool

from sagacity.errors import PolicyError, SettingsError, UpstreamUnavailable
from sagacity.mcp.policy import (
    Seen,
    ServerSpec,
    check_against,
    load_policy,
    parse_policy,
    resolve_path,
    skeleton,
)
from sagacity.mcp.upstream import Upstream
from tests.mcp.conftest import ROOT

GOOD = textwrap.dedent(
    """\
    version: 1
    reviewed: true
    server:
      name: tickets
      command: [python, -m, tests.mcp.ticket_server, --state, desk.json]
    tools:
      create_ticket:
        reversibility: REVERSIBLE
        compensation:
          tool: close_ticket
          arguments: {ticket_id: result.id}
          constants: {reason: rolled back by a saga}
      list_tickets:
        read_only: true
      send_email:
        reversibility: IRREVERSIBLE
    """
)


def edited(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new)


def test_the_documented_example_loads(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(GOOD)
    policy = load_policy(path)
    assert policy.source == path and policy.folder == tmp_path
    assert policy.session.boundary == "session" and policy.session.on_end == "compensate"
    assert policy.tools["list_tickets"].is_idempotent  # a read is harmless to repeat
    assert not policy.tools["create_ticket"].is_idempotent


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (edited("reviewed: true", "reviewed: false"), "reviewed is false: this is an unreviewed"),
        (edited("reviewed: true\n", ""), "reviewed (line 1): missing"),
        (edited("version: 1", "version: 2"), "version (line 1): Input should be 1"),
        (
            edited("    read_only: true", "    read_only: true\n    colour: red"),
            "tools.list_tickets.colour (line 15): unknown key",
        ),
        (
            edited("  name: tickets", "  name: tickets\n  url: http://x/mcp"),
            "exactly one of command",
        ),
        (
            edited("  command: [python, -m, tests.mcp.ticket_server, --state, desk.json]", ""),
            "exactly one of command",
        ),
        (edited("result.id", "id"), "'id' must be input.<path> or result.<path>"),
        (edited("result.id", "output.id"), "must be input.<path> or result.<path>"),
        (edited("result.id", "result."), "must be input.<path> or result.<path>"),
        (
            edited(
                "    reversibility: IRREVERSIBLE",
                "    reversibility: IRREVERSIBLE\n    compensation: {function: a.b:c}",
            ),
            "tools.send_email (line 16): an IRREVERSIBLE tool takes no compensation",
        ),
        (
            edited("    reversibility: REVERSIBLE\n", "    reversibility: COMPENSATABLE\n").replace(
                "    compensation:\n      tool: close_ticket\n"
                "      arguments: {ticket_id: result.id}\n"
                "      constants: {reason: rolled back by a saga}\n",
                "",
            ),
            "a COMPENSATABLE tool needs a compensation",
        ),
        (edited("    reversibility: IRREVERSIBLE", "    idempotent: true"), "say reversibility"),
        (
            edited("    read_only: true", "    read_only: true\n    reversibility: REVERSIBLE"),
            "a read_only tool has nothing to undo",
        ),
        (
            edited("      tool: close_ticket", "      tool: close_ticket\n      function: a.b:c"),
            "exactly one of tool",
        ),
        (
            edited("      tool: close_ticket\n", "      function: nocolon\n")
            .replace("      arguments: {ticket_id: result.id}\n", "")
            .replace("      constants: {reason: rolled back by a saga}\n", ""),
            "is not package.module:name",
        ),
        (edited("{reason: rolled", "{ticket_id: x, reason: rolled"), "ticket_id is both mapped"),
        (edited("    read_only: true", "    read_only: yes please"), "read_only (line 14)"),
        (edited("  name: tickets", "  name: tick ets/1"), "server.name"),
        (edited("  name: tickets", "  name: tickets\n  timeout_s: 0"), "greater than 0"),
        (
            edited(
                "  name: tickets", "  name: tickets\n  url: http://x/mcp\n  env: {A: b}"
            ).replace("  command: [python, -m, tests.mcp.ticket_server, --state, desk.json]\n", ""),
            "env and cwd are for a stdio upstream",
        ),
        (GOOD + "session:\n  commit_tool: send_email\n", "clashes with a tool named in tools"),
        (GOOD + "session:\n  commit_tool: x\n  rollback_tool: x\n", "are both 'x'"),
        (GOOD + "session:\n  boundary: sometimes\n", "session.boundary"),
        (
            GOOD.split("tools:")[0] + "tools: {}\n",
            "tools (line 6): Dictionary should have at least",
        ),
        (GOOD + "  send_email:\n    read_only: true\n", "key 'send_email' appears twice"),
        ("tools: [unclosed\n", "not valid YAML"),
        ("- a\n- b\n", "a policy is a mapping"),
        ("", "a policy is a mapping"),
        ("version: 1\x00", "NUL bytes"),
        ("[" * 5000, "nested too deeply"),
    ],
)
def test_a_bad_policy_says_what_and_where(text: str, expected: str) -> None:
    with pytest.raises(PolicyError) as refused:
        parse_policy(text, source=Path("tickets.yaml"))
    message = str(refused.value)
    assert message.startswith("tickets.yaml"), message
    assert expected in message, message
    assert isinstance(refused.value, SettingsError)  # the CLI reports it like any setting


def test_an_unreadable_file_is_a_policy_error(tmp_path: Path) -> None:
    with pytest.raises(PolicyError, match="cannot read the MCP policy"):
        load_policy(tmp_path / "missing.yaml")
    (tmp_path / "latin1.yaml").write_bytes(b"version: 1 \xff\n")
    with pytest.raises(PolicyError, match="cannot read the MCP policy"):
        load_policy(tmp_path / "latin1.yaml")


@pytest.fixture(scope="module")
async def listed(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[list[Tool]]:
    """The ticket desk's real tool list, over stdio."""
    state = tmp_path_factory.mktemp("desk") / "desk.json"
    server = ServerSpec(
        name="tickets",
        command=[sys.executable, "-m", "tests.mcp.ticket_server", "--state", str(state)],
    )
    async with Upstream(server, folder=ROOT) as upstream:
        yield await upstream.list_tools()


async def test_the_example_fits_the_desk(listed: list[Tool]) -> None:
    check_against(parse_policy(GOOD), listed)


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("  list_tickets:", "  list_tikets:", "tools.list_tikets: the upstream has no tool"),
        ("tool: close_ticket", "tool: shut_ticket", "compensation.tool: the upstream has no tool"),
        ("{ticket_id: result.id}", "{id: result.id}", "'close_ticket' takes no argument 'id'"),
        (
            "{ticket_id: result.id}",
            "{}",
            "'close_ticket' requires 'ticket_id', which is not mapped",
        ),
        ("{reason: rolled back by a saga}", "{why: x}", "takes no argument 'why'"),
        ("result.id", "input.ticket", "'create_ticket' takes no argument 'ticket'"),
    ],
)
async def test_a_policy_that_does_not_fit_the_upstream_names_each_misfit(
    listed: list[Tool], old: str, new: str, expected: str
) -> None:
    with pytest.raises(PolicyError) as refused:
        check_against(parse_policy(edited(old, new)), listed)
    assert expected in str(refused.value), refused.value
    assert "does not fit the upstream 'tickets'" in str(refused.value)


async def test_observe_modes_skeleton_loads_once_reviewed(listed: list[Tool]) -> None:
    server = parse_policy(GOOD).server
    seen = {
        "create_ticket": Seen(calls=2, argument_keys={"title"}, result_keys={"id", "title"}),
        "send_email": Seen(calls=1, argument_keys={"to", "body"}),
    }
    text = skeleton(server, seen, listed)
    with pytest.raises(PolicyError, match="reviewed is false"):
        parse_policy(text)
    # the guess at create_ticket's undo, with close_ticket's required argument
    assert "# compensation: {tool: close_ticket, arguments: {ticket_id: result.id}}" in text
    reviewed = parse_policy(text.replace("reviewed: false", "reviewed: true"))
    assert set(reviewed.tools) == {"create_ticket", "send_email"}
    assert {t.reversibility for t in reviewed.tools.values()} == {"IRREVERSIBLE"}
    assert reviewed.server == server
    check_against(reviewed, listed)


@pytest.mark.parametrize(
    ("path", "result", "expected"),
    [
        ("result.id", {"content": [], "structuredContent": {"id": "T-1"}}, "T-1"),
        ("result.id", {"content": [{"type": "text", "text": '{"id": "T-2"}'}]}, "T-2"),
        ("result.items.1.id", {"structuredContent": {"items": [{}, {"id": 7}]}}, 7),
        ("input.who.name", None, "ann"),
    ],
)
def test_a_mapping_path_resolves_in_the_result_convention(
    path: str, result: object, expected: object
) -> None:
    assert resolve_path(path, input={"who": {"name": "ann"}}, result=result) == expected


@pytest.mark.parametrize(
    ("path", "result", "expected"),
    [
        ("result.id", None, "result has no 'id' (it is nothing)"),
        ("result.id", {"content": [{"type": "text", "text": "not json"}]}, "it is a str"),
        ("result.ids.0", {"structuredContent": {"id": 1}}, "result has no 'ids' (it is an object"),
        ("input.x", None, "input has no 'x'"),
    ],
)
def test_a_mapping_path_that_names_nothing_says_where_it_stopped(
    path: str, result: object, expected: str
) -> None:
    with pytest.raises(LookupError, match=expected.replace("(", r"\(").replace(")", r"\)")):
        resolve_path(path, input={}, result=result)


async def test_an_upstream_that_is_down_is_a_clear_error_not_a_hang() -> None:
    for server in (
        ServerSpec(name="t", url="http://127.0.0.1:9/mcp", timeout_s=5),
        ServerSpec(name="t", command=["/no/such/server"], timeout_s=5),
        ServerSpec(name="t", command=[sys.executable, "-c", "pass"], timeout_s=5),
    ):
        with pytest.raises(UpstreamUnavailable, match="cannot reach MCP upstream 't'"):
            async with Upstream(server):
                pass
