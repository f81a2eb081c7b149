"""`sagacity dev` supervises its servers: a Temporal or Postgres process killed under it comes back
with its data, on the same port and socket, a saga waiting at its gate meanwhile completes through
a worker that reconnected on its own, and a server that keeps dying ends the stack with exit 1
naming it."""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from sagacity.devsupervise import RESTART_WINDOW_S
from tests.docs.test_documented_commands import ENDPOINT_VARIABLES
from tests.test_devstack import _sagacity_exe, private_data_dir

__all__ = ["private_data_dir"]  # the fixture, imported for this module's tests

REPO = Path(__file__).resolve().parents[1]
RESTARTED_TEMPORAL = re.compile(
    r"restarted the Temporal dev server \(exited with code -9\) on (\S+) with its state file"
)
RESTARTED_POSTGRES = re.compile(r"restarted the embedded Postgres \(its postmaster is gone\)")


class DevProcess:
    """A `sagacity dev` run by a fresh clone's environment, its output (both streams) collected.

    ``session_codec``: keep the test session's payload codec keys (a client of the session's
    reads what the stack's workers write), rather than let the stack make its own.
    """

    def __init__(self, data_dir: Path, *args: str, session_codec: bool = False) -> None:
        env = {
            k: v
            for k, v in os.environ.items()
            if session_codec or not k.startswith("SAGACITY_CODEC_KEYS")
        }
        for name in ENDPOINT_VARIABLES:
            env.pop(name, None)
        env["SAGACITY_DATA_DIR"] = str(data_dir)
        self.env = env
        self.data_dir = data_dir
        self.lines: list[str] = []
        self.proc = subprocess.Popen(
            [_sagacity_exe(), "dev", "--port", "0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def wait_for(self, pattern: re.Pattern[str], *, after: int = 0, timeout: float = 90) -> str:
        """The first output line from index ``after`` on that matches; fails after ``timeout``."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for line in self.lines[after:]:
                if pattern.search(line):
                    return line
            if self.proc.poll() is not None and not self._reader.is_alive():
                break
            time.sleep(0.2)
        pytest.fail(f"no line matching {pattern.pattern!r} in:\n{self.output}")

    def exports(self) -> dict[str, str]:
        self.wait_for(re.compile("Ctrl-C"), timeout=180)
        return {k: shlex.split(v)[0] for k, v in re.findall(r"export (\w+)=(\S+)", self.output)}

    def temporal_pid(self) -> int:
        """The Temporal server the stack runs: its child whose command is the dev server."""
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
                cmdline = (stat.parent / "cmdline").read_bytes()
            except (OSError, IndexError, ValueError):
                continue
            if ppid == self.proc.pid and b"start-dev" in cmdline:
                return int(stat.parent.name)
        pytest.fail(f"no Temporal server among the children of {self.proc.pid}")

    def postmaster_pid(self) -> int:
        return int((self.data_dir / "postgres" / "postmaster.pid").read_text().split()[0])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reader.join(timeout=10)
        if self.proc.stdout is not None:
            self.proc.stdout.close()


@pytest.fixture
def dev_process(private_data_dir: Path) -> Iterator[DevProcess]:
    dev = DevProcess(private_data_dir)
    try:
        yield dev
    finally:
        dev.stop()


def _sagacity(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [_sagacity_exe(), *args], env=env, cwd=REPO, capture_output=True, text=True, timeout=180
    )


def _kill_temporal(dev: DevProcess) -> tuple[int, int]:
    """SIGKILL the stack's Temporal server; (its pid, how many output lines there were)."""
    pid, seen = dev.temporal_pid(), len(dev.lines)
    os.kill(pid, signal.SIGKILL)
    return pid, seen


def test_killed_servers_come_back_with_their_data_and_a_waiting_saga_completes(
    dev_process: DevProcess, tmp_path: Path
) -> None:
    dev = dev_process
    env = dev.env | dev.exports()
    worker_log = (tmp_path / "worker.log").open("w")
    worker = subprocess.Popen(
        [_sagacity_exe(), "worker", "--app", "workflows.order.app"],
        env=env,
        cwd=REPO,
        stdin=subprocess.DEVNULL,
        stdout=worker_log,
        stderr=subprocess.STDOUT,
    )
    try:
        started = _sagacity(env, "saga", "start", "--order", "p-1:1", "--wait")
        assert started.returncode == 0, started.stdout + started.stderr
        saga = started.stdout.strip()

        pid, seen = _kill_temporal(dev)
        first_kill = time.monotonic()
        line = dev.wait_for(RESTARTED_TEMPORAL, after=seen)
        assert RESTARTED_TEMPORAL.search(line)[1] == env["TEMPORAL_ADDRESS"]  # type: ignore[index]
        assert dev.temporal_pid() != pid
        assert str(dev.data_dir / "temporal.db") in line

        seen = len(dev.lines)
        os.kill(dev.postmaster_pid(), signal.SIGKILL)
        dev.wait_for(RESTARTED_POSTGRES, after=seen)
        with psycopg.connect(env["SAGACITY_DATABASE_URL"]) as conn:  # the same URL
            assert conn.execute("SELECT current_user").fetchone() == ("sagacity_app",)

        # the saga started before the kills, and its gate, survived; the worker reconnected
        approved = _sagacity(env, "approvals", "approve", saga, "5")
        assert approved.returncode == 0, approved.stdout + approved.stderr
        status = _sagacity(env, "saga", "status", saga, "--wait")
        assert status.returncode == 0, status.stdout + status.stderr
        assert "completed" in status.stdout, status.stdout
        assert worker.poll() is None, (tmp_path / "worker.log").read_text()

        # killed again and again: two more restarts within the minute, then the stack ends
        kills = 0
        while dev.proc.poll() is None and kills < 5:
            _, seen = _kill_temporal(dev)
            kills += 1
            while dev.proc.poll() is None and not RESTARTED_TEMPORAL.search(
                "".join(dev.lines[seen:])
            ):
                time.sleep(0.2)
        assert dev.proc.wait(timeout=60) == 1, dev.output
        # (unless the first restart has left the window meanwhile, on a slow machine)
        assert kills == (3 if time.monotonic() - first_kill < RESTART_WINDOW_S else 4), dev.output
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        worker_log.close()
    dev.stop()
    assert "the Temporal dev server died again (exited with code -9)" in dev.output
    assert "stopping the stack" in dev.output
    assert not (dev.data_dir / "dev.env").exists()  # gone with the stack


def test_a_postgres_that_dies_past_the_restarts_allowed_ends_the_stack(
    private_data_dir: Path,
) -> None:
    dev = DevProcess(private_data_dir, "--restarts", "0")
    try:
        dev.exports()
        os.kill(dev.postmaster_pid(), signal.SIGKILL)
        assert dev.proc.wait(timeout=60) == 1, dev.output
    finally:
        dev.stop()
    assert "the embedded Postgres died (its postmaster is gone)" in dev.output
    assert not RESTARTED_POSTGRES.search(dev.output)
