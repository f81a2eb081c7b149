"""Fixtures for the MCP tests: the ticket desk upstream (stdio or streamable HTTP, started by the
test), policies for it, and a worker that serves its tools the way ``sagacity worker --app
sagacity.mcp.app`` does.

* ``desk`` (function): a fresh :class:`Desk` (its state file in a temporary folder); the
  upstream's own account of every call is ``desk.state()``.
* ``http_desk`` (function): the same desk, also served over streamable HTTP by a server process
  of its own (``desk.url``; ``desk.kill()`` / ``desk.start()``).
* ``worker_settings`` (function): the session's settings pointed at its database, Temporal and
  this test's task queue, as a worker of ``sagacity worker`` reads them.
* ``pool``, ``journal``, ``approvals``: the saga tests' stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.settings import Settings
from sagacity.temporal.models import SagaResult, SagaSpec, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import running_worker
from tests.mcp.ticket_server import read_state
from tests.temporal.conftest import approvals, journal, pool

__all__ = ["approvals", "journal", "pool"]

ROOT = Path(__file__).resolve().parents[2]

#: the tools a test policy names, as the docs' example does
POLICY_TOOLS: dict[str, Any] = {
    "create_ticket": {
        "reversibility": "REVERSIBLE",
        "compensation": {
            "tool": "close_ticket",
            "arguments": {"ticket_id": "result.id"},
            "constants": {"reason": "rolled back by a saga"},
        },
    },
    "list_tickets": {"read_only": True},
    "ticket_badge": {"read_only": True},
    "send_email": {"reversibility": "IRREVERSIBLE"},
}


@dataclass
class Desk:
    """The ticket server's state file, and (for HTTP) the server process serving it."""

    state_file: Path
    port: int | None = None
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def command(self) -> list[str]:
        return [sys.executable, "-m", "tests.mcp.ticket_server", "--state", str(self.state_file)]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    def state(self) -> dict[str, Any]:
        return read_state(self.state_file)

    def calls(self, tool: str) -> list[dict[str, Any]]:
        """The arguments of each call of ``tool`` the upstream received, in order."""
        return [c["arguments"] for c in self.state()["calls"] if c["tool"] == tool]

    def policy(self, transport: str = "stdio", **changes: Any) -> Path:
        """A reviewed policy file for this desk over ``transport``; ``changes`` replace
        top-level keys (``tools=...``) or, as ``server_x``, keys of ``server``."""
        server: dict[str, Any] = {"name": "tickets", "timeout_s": 10}
        if transport == "stdio":
            server |= {"command": self.command, "cwd": str(ROOT)}
        else:
            server["url"] = self.url
        server |= {
            k.removeprefix("server_"): v for k, v in changes.items() if k.startswith("server_")
        }
        data: dict[str, Any] = {"version": 1, "reviewed": True, "server": server}
        data["tools"] = POLICY_TOOLS
        data |= {k: v for k, v in changes.items() if not k.startswith("server_")}
        path = self.state_file.with_suffix(f".{transport}.policy.yaml")
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    def start(self) -> None:
        """Serve the desk over streamable HTTP (on the same port after a kill)."""
        if self.port is None:
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                self.port = int(sock.getsockname()[1])
        self.process = subprocess.Popen(
            [*self.command, "--http", str(self.port)], cwd=ROOT, stderr=subprocess.DEVNULL
        )
        deadline = time.monotonic() + 20
        while True:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    return
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"the ticket server did not start on port {self.port}")
            time.sleep(0.05)

    def kill(self) -> None:
        """SIGKILL the HTTP server: no goodbye to its clients."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()


@pytest.fixture
def desk(tmp_path: Path) -> Desk:
    return Desk(tmp_path / "desk.json")


@pytest.fixture
def http_desk(desk: Desk) -> Iterator[Desk]:
    desk.start()
    yield desk
    desk.kill()


@pytest.fixture
def worker_settings(
    settings: Settings, endpoints: Endpoints, database_url: str, task_queue: str
) -> Settings:
    return settings.model_copy(
        update={
            "database_url": database_url,
            "temporal_address": endpoints.temporal_address,
            "temporal_namespace": endpoints.temporal_namespace,
            "task_queue": task_queue,
            "log_interval": timedelta(0),
        }
    )


@contextlib.asynccontextmanager
async def mcp_worker(
    settings: Settings, policy: Path, apps: tuple[str, ...] = ("sagacity.mcp.app",)
) -> AsyncIterator[None]:
    """A worker serving ``apps`` with ``SAGACITY_MCP_POLICY=policy``, as ``sagacity worker``."""
    configured = settings.model_copy(update={"mcp_policy": policy})
    async with running_worker(configured, list(apps), graceful_s=1):
        yield


async def run_steps(
    client: Client, settings: Settings, saga_id: str, steps: list[Step], **options: Any
) -> SagaResult:
    spec = SagaSpec(steps=steps)
    if options:
        spec.options = spec.options.model_copy(update=options)
    return await asyncio.wait_for(
        client.execute_workflow(
            STEPS_WORKFLOW,
            spec,
            id=saga_id,
            task_queue=settings.task_queue,
            result_type=SagaResult,
        ),
        120,
    )


def payload(row: Any) -> Any:
    return json.loads(row.payload) if row.payload else None
