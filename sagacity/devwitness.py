"""The dev stack's witness: its own key and state under ``<data_dir>/witness``, served on loopback.

``sagacity dev`` (and the test session, which runs the same configuration) starts one C2SP
tlog-witness (:mod:`sagacity.evidence.witness`) in a thread of the process that runs the stack,
with a key of its own made once, and pins it in the dev trust file with a quorum of one: every
tree head the workers' sequencers publish is cosigned by it, and a verifier names a rollback of
the checkpoint folder against the head it holds. The folder is apart from ``anchors/`` (which the
workers write) and ``trust/``. The port is kept in ``<folder>/port`` so the pinned URL stays
right across restarts (7380 the first time, when free).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import uvicorn
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import DevStackError, SagacityError
from sagacity.evidence.note import NoteKey
from sagacity.evidence.tlog import ORIGIN_PREFIX
from sagacity.evidence.trust import TrustedWitness
from sagacity.evidence.witness import DEFAULT_NAME, Witness, witness_key
from sagacity.evidence.witness_http import create_app

__all__ = ["DEFAULT_PORT", "DevWitness", "log_key"]

#: the port the dev witness takes the first time, when it is free
DEFAULT_PORT = 7380
_READY_S = 10.0


def log_key(database: str, signer: Ed25519PublicKey) -> NoteKey:
    """The verifier key of the log a sequencer publishes for ``database`` (its default origin)."""
    return NoteKey(ORIGIN_PREFIX + database, signer)


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _Quiet(uvicorn.Server):
    """A uvicorn server in a thread: the process's signals stay its owner's."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


class DevWitness:
    """A witness with its own folder and key, served on 127.0.0.1 until :meth:`stop`."""

    def __init__(self, folder: Path, *, port: int | None = None) -> None:
        self.folder = folder
        try:
            self.key = witness_key(folder)
            self.witness = Witness(folder, DEFAULT_NAME, self.key, [])
        except (SagacityError, OSError) as exc:
            raise DevStackError(f"cannot set up the dev witness in {folder}: {exc}") from None
        self.port = self._port(port)
        self._server: _Quiet | None = None
        self._thread: threading.Thread | None = None

    def _port(self, wanted: int | None) -> int:
        """The port kept in ``<folder>/port`` when free, else ``wanted`` (else 7380) when free,
        else any free one; kept for the next start."""
        kept = self.folder / "port"
        with contextlib.suppress(OSError, ValueError):
            port = int(kept.read_text())
            if _free(port):
                return port
        candidates = [p for p in (wanted, DEFAULT_PORT) if p]
        port = next((p for p in candidates if _free(p)), 0)
        if port == 0:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = int(probe.getsockname()[1])
        kept.write_text(f"{port}\n")
        return port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def trusted(self) -> TrustedWitness:
        """The trust file's entry for this witness."""
        return TrustedWitness(DEFAULT_NAME, self.key.public_key(), self.url)

    def witness_log(self, log: NoteKey) -> None:
        """Witness ``log`` (its origin and key) from now on."""
        self.witness.logs[log.name] = log

    def start(self) -> None:
        """Serve in a daemon thread; return once it listens (:class:`DevStackError` if not)."""
        config = uvicorn.Config(
            create_app(self.witness),
            host="127.0.0.1",
            port=self.port,
            access_log=False,
            log_level="warning",
            lifespan="off",
        )
        self._server = server = _Quiet(config)
        self._thread = threading.Thread(
            target=lambda: asyncio.run(server.serve()), name="sagacity-dev-witness", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _READY_S
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise DevStackError(f"the dev witness did not start on {self.url}")
            time.sleep(0.02)

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._server is not None and self._thread is not None:
            self._server.should_exit = True
            self._thread.join(timeout=_READY_S)
        self._server = self._thread = None
