"""Fixtures of the gateway tests: a worker process serving ``sagacity.mcp.app`` on the ticket
server, policies for the gateway, and ``sagacity mcp`` as a real subprocess driven by a real MCP
client (stdio, or streamable HTTP for a gateway the test kills).

Import the fixtures into a test module by name (``tests/mcp/conftest.py`` is the MCP tools'
helper's file).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from mcp import Client
from mcp.client import ClientRequestContext
from mcp.client.stdio import StdioServerParameters

from sagacity.devstack import Endpoints
from sagacity.settings import Settings
from tests.mcp.ticket_server import read_state
from tests.temporal.test_crash import WorkerProcess

REPO = Path(__file__).resolve().parents[2]
SAGACITY = str(Path(sys.executable).with_name("sagacity"))
#: short, so a lost session ends within a test; the gateway beats three times a lease
LEASE_S = 4


def policy_text(
    state: Path,
    *,
    boundary: str = "session",
    on_end: str = "compensate",
    lease_s: float = LEASE_S,
    create_ticket: str = "",
) -> str:
    """A policy for the ticket server keeping its state in ``state``; ``create_ticket``: more
    keys of that tool (YAML lines, indented as its others)."""
    command = json.dumps([sys.executable, "-m", "tests.mcp.ticket_server", "--state", str(state)])
    return f"""\
version: 1
reviewed: true
server:
  name: tickets
  command: {command}
  cwd: {json.dumps(str(REPO))}
  timeout_s: 20
session:
  boundary: {boundary}
  on_end: {on_end}
  lease_s: {lease_s}
tools:
  create_ticket:
    reversibility: REVERSIBLE
    compensation:
      tool: close_ticket
      arguments: {{ticket_id: result.id}}
      constants: {{reason: rolled back by a saga}}
{create_ticket}  list_tickets:
    read_only: true
  send_email:
    reversibility: IRREVERSIBLE
"""


def calls(state: Path, tool: str) -> list[dict[str, Any]]:
    """The upstream's own log of ``tool``'s calls, oldest first: their arguments."""
    return [c["arguments"] for c in read_state(state)["calls"] if c["tool"] == tool]


@dataclass
class McpStack:
    """A worker process for the ticket server's tools, on a task queue of its own."""

    state: Path
    policy: Path
    task_queue: str
    endpoints: Endpoints
    folder: Path
    worker: WorkerProcess
    #: the session's decision keys, as ``sagacity dev`` makes them: a keyring trusting alice's
    #: approver key, which ``sagacity`` processes of the stack sign with
    keys: dict[str, str]

    def write_policy(self, name: str, **session: Any) -> Path:
        """A gateway's policy: the worker's tools, with these ``session`` settings."""
        path = self.folder / f"{name}.policy.yaml"
        path.write_text(policy_text(self.state, **session))
        return path

    def env(self, **extra: str) -> dict[str, str]:
        """The environment of a ``sagacity`` process against the test stack and queue."""
        return {
            **os.environ,
            "TEMPORAL_ADDRESS": self.endpoints.temporal_address,
            "TEMPORAL_NAMESPACE": self.endpoints.temporal_namespace,
            "SAGACITY_TASK_QUEUE": self.task_queue,
            **self.keys,
            **extra,
        }


@pytest.fixture(scope="module")
async def mcp_stack(
    endpoints: Endpoints,
    database_url: str,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[McpStack]:
    async with started_stack(endpoints, database_url, settings, tmp_path_factory) as stack:
        yield stack


@contextlib.asynccontextmanager
async def started_stack(
    endpoints: Endpoints,
    database_url: str,
    settings: Settings,
    tmp_path_factory: pytest.TempPathFactory,
    create_ticket: str = "",
) -> AsyncIterator[McpStack]:
    """The worker process of :func:`mcp_stack`; ``create_ticket``: as :func:`policy_text`'s."""
    folder = tmp_path_factory.mktemp("mcp-gateway")
    state = folder / "tickets.json"
    policy = folder / "worker.policy.yaml"
    policy.write_text(policy_text(state, create_ticket=create_ticket))
    task_queue = f"mcp-{uuid.uuid4().hex[:8]}"
    worker = WorkerProcess(
        endpoints, database_url, task_queue, folder / "worker.log", apps=("sagacity.mcp.app",)
    )
    # signed decisions required, as on the dev stack (its keys are not inherited: the database
    # is named, and the repository's `.sagacity` is not this session's)
    keys = {
        "SAGACITY_KEYRING": str(settings.keyring),
        "SAGACITY_APPROVER_KEY": str(settings.approver_key),
    }
    worker.env.update(SAGACITY_MCP_POLICY=str(policy), **keys)
    await worker.start()
    try:
        yield McpStack(state, policy, task_queue, endpoints, folder, worker, keys)
    finally:
        worker.stop()


@dataclass
class User:
    """The MCP client's user, who answers every elicitation with ``content``; what they were
    asked, in order."""

    content: dict[str, Any]
    asked: list[str] = field(default_factory=list)

    async def answer(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        self.asked.append(params.message)
        return types.ElicitResult(action="accept", content=self.content)


@dataclass
class Heard:
    """What the gateway told its client besides results: log messages and progress."""

    messages: list[str] = field(default_factory=list)

    async def log(self, params: types.LoggingMessageNotificationParams) -> None:
        self.messages.append(str(params.data))

    async def progress(self, progress: float, total: float | None, message: str | None) -> None:
        if message:
            self.messages.append(message)

    async def said(self, words: str, timeout: float = 60) -> str:
        """The first message with ``words`` in it, once it has come."""
        deadline = asyncio.get_running_loop().time() + timeout
        while True:
            for message in self.messages:
                if words in message:
                    return message
            if asyncio.get_running_loop().time() > deadline:
                raise TimeoutError(f"nothing said {words!r}; heard {self.messages}")
            await asyncio.sleep(0.1)

    async def approval_command(self, timeout: float = 60) -> list[str]:
        """The ``sagacity approvals approve SAGA SEQ`` the gateway said to run, as argv."""
        message = await self.said("sagacity approvals approve ", timeout)
        tail = message.split("sagacity approvals approve ", 1)[1].split()
        return ["approvals", "approve", tail[0], tail[1]]


@contextlib.asynccontextmanager
async def stdio_gateway(
    stack: McpStack,
    policy: Path,
    *args: str,
    heard: Heard | None = None,
    client_options: dict[str, Any] | None = None,
    **env: str,
) -> AsyncIterator[Client]:
    """``sagacity mcp --policy POLICY ARGS`` started by an MCP client over stdio."""
    heard = heard or Heard()
    params = StdioServerParameters(
        command=SAGACITY,
        args=["mcp", "--policy", str(policy), *args],
        env=stack.env(**env),
        cwd=REPO,
    )
    async with Client(
        params,
        logging_callback=heard.log,
        log_level="info",
        read_timeout_seconds=120,
        **(client_options or {}),
    ) as client:
        yield client


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class HttpGateway:
    """``sagacity mcp --transport http`` as a process of the test's own, to kill at will."""

    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()


@contextlib.contextmanager
def http_gateway(stack: McpStack, policy: Path, *args: str) -> Iterator[HttpGateway]:
    port = free_port()
    log = stack.folder / f"gateway-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                SAGACITY,
                "mcp",
                "--policy",
                str(policy),
                "--transport",
                "http",
                "--port",
                str(port),
                *list(args),
            ],
            cwd=REPO,
            env=stack.env(),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    gateway = HttpGateway(f"http://127.0.0.1:{port}/mcp", proc, log)
    try:
        while not _listening(port):
            if proc.poll() is not None:
                raise RuntimeError(f"the gateway exited early:\n{log.read_text()[-2000:]}")
            time.sleep(0.1)
        yield gateway
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                gateway.kill()


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.2):
            return True
    except OSError:
        return False


def text_of(result: types.CallToolResult) -> str:
    return " ".join(b.text for b in result.content if isinstance(b, types.TextContent))


def saga_named(text: str) -> str:
    """The first gateway saga id (``mcp-tickets-<hex>[-n]``) in ``text``."""
    found = re.search(r"mcp-tickets-[0-9a-f]{12}(?:-\d+)?", text)
    assert found is not None, f"no saga named in {text!r}"
    return found.group(0)
