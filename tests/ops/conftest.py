"""Fixtures for operations tests: the saga fixtures, the ``sagacity`` CLI, worker processes.

Everything runs against the session's real Temporal server and Postgres. A worker process is the
installed ``sagacity worker`` command, exactly as ``deploy/`` runs it.
"""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import signal
import subprocess
import time
import traceback
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from sagacity.cli.main import app as main_app
from sagacity.devstack import Endpoints
from sagacity.evidence.decisions import Signer, Statement
from sagacity.evidence.keys import load_private_key
from sagacity.evidence.trust import TrustedKey, TrustRoots, write_trust
from sagacity.settings import Settings
from sagacity.temporal.models import Approve, PendingApproval
from tests.approvals import conftest as cli_fixtures
from tests.temporal import conftest as saga_fixtures

# fixtures shared by name: the journal, the shop, an in-process worker, the CLI runner, sagas
# with a SUSPECT call
pool = saga_fixtures.pool
journal = saga_fixtures.journal
approvals = saga_fixtures.approvals
shop_session = saga_fixtures.shop_session
shop = saga_fixtures.shop
worker = saga_fixtures.worker
cli = cli_fixtures.cli
make_suspects = cli_fixtures.make_suspects
CliResult = cli_fixtures.CliResult
Cli = cli_fixtures.Cli

REPO = Path(__file__).resolve().parents[2]
SAGACITY = str(REPO / ".venv" / "bin" / "sagacity")
#: the worker command the container image runs (deploy/Dockerfile) and these tests start
WORKER_COMMAND = "sagacity worker --app workflows.order.app"


def stack_env(endpoints: Endpoints, database_url: str, task_queue: str) -> dict[str, str]:
    """The environment that points a ``sagacity`` process at the test servers."""
    return {
        **os.environ,
        "SAGACITY_DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": endpoints.temporal_address,
        "TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
        "SAGACITY_TASK_QUEUE": task_queue,
    }


def anchor_env(settings: Settings) -> dict[str, str]:
    """The session's anchors, fingerprint key and decision keyring, as a dev stack worker has them."""
    return {
        "SAGACITY_SIGNING_KEY": str(settings.signing_key),
        "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(settings.checkpoint_public_key),
        "SAGACITY_TRUST_FILE": str(settings.trust_file),
        "SAGACITY_CHECKPOINT_DIR": str(settings.checkpoint_dir),
        "SAGACITY_REDACT_KEY": str(settings.redact_key),
        "SAGACITY_KEYRING": str(settings.keyring),
    }


def pinned_trust(signing_key: Path, folder: Path) -> Path:
    """A trust file pinning ``signing_key``'s public half, in ``folder`` (the auditor's own, apart
    from the workers' folders): what a verifier is handed out of band."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "trust.json"
    if not path.exists():
        key = load_private_key(signing_key).public_key()
        write_trust(path, TrustRoots((TrustedKey("workers", key),)))
    return path


def signed_approval(
    settings: Settings, saga_id: str, pending: PendingApproval, who: str
) -> Approve:
    """The ``approve`` signal for ``pending``, signed as ``who``: alice with her own key, anyone
    else by the session's service key (which signs for whoever it authenticated)."""
    key = settings.approver_key if who == "alice" else settings.service_key
    assert key is not None
    statement = Statement(saga_id, pending.journal_seq, pending.input_hash, "approve", who)
    return Approve(
        journal_seq=pending.journal_seq,
        approver=who,
        input_hash=pending.input_hash,
        signature=Signer.open(key).sign(statement),
    )


class WorkerProcess:
    """``sagacity worker --app workflows.order.app`` as a child process, logging to a file."""

    def __init__(self, env: dict[str, str], log: Path) -> None:
        self.env = env
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None
        self.metrics_address: str | None = None

    async def start(self, timeout: float = 60.0) -> WorkerProcess:
        command = [SAGACITY, *shlex.split(WORKER_COMMAND)[1:]]
        with self.log.open("ab") as out:
            offset = out.tell()
            self.proc = subprocess.Popen(
                command, cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text(offset)
            if "worker ready" in text:
                found = re.search(r"metrics and probes on http://(\S+) ", text)
                self.metrics_address = found.group(1) if found else None
                return self
            if self.proc.poll() is not None:
                raise RuntimeError(f"worker exited early:\n{text[-3000:]}")
            await asyncio.sleep(0.1)
        raise TimeoutError(f"worker never became ready:\n{self.text(offset)[-3000:]}")

    def text(self, offset: int = 0) -> str:
        with self.log.open("rb") as out:
            out.seek(offset)
            return out.read().decode(errors="replace")

    def get(self, path: str) -> tuple[int, str]:
        """GET ``path`` on the worker's metrics/probe endpoint: (status, body)."""
        assert self.metrics_address, "the worker serves no metrics (SAGACITY_METRICS_ADDRESS)"
        try:
            with urllib.request.urlopen(f"http://{self.metrics_address}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def terminate(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)

    async def wait(self, timeout: float) -> int:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while self.proc.poll() is None:
            if time.monotonic() > deadline:
                raise TimeoutError(f"worker still running after {timeout}s")
            await asyncio.sleep(0.05)
        return self.proc.returncode

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def sagacity(endpoints: Endpoints, database_url: str) -> Cli:
    """The ``sagacity`` command run in this process, against the test servers.

    The same typer app with the same arguments, without a new interpreter's 3 s of imports per
    call; the installed executable itself is run by the worker, tracing and documentation tests.
    ``SAGACITY_SOFT_EXIT`` makes its exit a ``SystemExit`` the runner catches.
    """
    env = {
        "SAGACITY_DATABASE_URL": database_url,
        "TEMPORAL_ADDRESS": endpoints.temporal_address,
        "TEMPORAL_NAMESPACE": endpoints.temporal_namespace,
        "SAGACITY_SOFT_EXIT": "1",
    }
    runner = CliRunner()
    # the runner swaps the process's stdio and environment: one invocation at a time
    one_at_a_time = asyncio.Lock()

    async def run(*args: str, extra_env: dict[str, str] | None = None) -> CliResult:
        async with one_at_a_time:
            result = await asyncio.to_thread(
                runner.invoke, main_app, list(args), env={**env, **(extra_env or {})}
            )
        stderr = result.stderr
        if result.exception is not None and not isinstance(result.exception, SystemExit):
            stderr += "".join(traceback.format_exception(result.exception))
        return CliResult(result.exit_code, result.stdout, stderr)

    return run


StartWorker = Callable[..., Coroutine[Any, Any, WorkerProcess]]


@pytest.fixture
async def start_worker(
    endpoints: Endpoints, database_url: str, task_queue: str, tmp_path: Path, settings: Settings
) -> AsyncIterator[StartWorker]:
    """Start ``sagacity worker`` processes on the test's task queue, logged in as sagacity_app,
    signing checkpoints and checking decisions against the session's keyring; all stopped at the
    end. A setting given as ``""`` is left unset."""
    started: list[WorkerProcess] = []

    async def start(**env: str) -> WorkerProcess:
        full = {**stack_env(endpoints, database_url, task_queue), **anchor_env(settings), **env}
        full = {name: value for name, value in full.items() if value != "" or name not in env}
        process = WorkerProcess(full, tmp_path / f"worker-{len(started)}.log")
        started.append(process)
        return await process.start()

    try:
        yield start
    finally:
        for process in started:
            process.stop()
