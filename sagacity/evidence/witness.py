"""A C2SP tlog-witness: cosigns a log's tree heads, never two that are inconsistent.

The protocol (https://c2sp.org/tlog-witness): a log POSTs ``add-checkpoint`` with the size of
the last head it believes the witness cosigned (``old``), a consistency proof from that size,
and its newly signed checkpoint. The witness checks, in the protocol's order: the request is
well formed (400), it knows the log's origin (404), the log's key signed the note (403), ``old``
is not above the new size (400), ``old`` is the size it holds (409, ``text/x.tlog.size`` body:
its size), the proof verifies (422), a same-size head has the same root (409). Only then does it
store the head and answer its ``cosignature/v1`` line. The check and the store happen under one
exclusive lock, so two requests cannot both advance from the same size, and a head smaller than
the one held (a rollback) or of the same size with another root (a fork) is never cosigned.

State, per log origin, in ``<folder>/logs/<hex SHA-256 of the origin>.json``: ``origin``,
``size``, ``root`` (base64) and ``note`` (the checkpoint as cosigned: the log's signature lines
and the witness's own cosignature), replaced atomically (write, fsync, rename, fsync the folder).
A log-signed request refused as a fork or a bad proof is kept in ``<folder>/refused/``: the
log's signature on it proves the log signed a head inconsistent with one it signed before.
No Python library implements C2SP signed notes or this protocol (PyPI has none kept up); it is
built on :mod:`sagacity.evidence.note` and :mod:`sagacity.evidence.merkle`.
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.errors import EvidenceUnavailable, WitnessRefused
from sagacity.evidence.keys import generate_key, load_private_key
from sagacity.evidence.merkle import EMPTY_ROOT, verify_consistency
from sagacity.evidence.note import (
    COSIGNATURE_V1,
    NoteKey,
    TreeHead,
    WitnessCosigner,
    note_head,
    open_note,
)
from sagacity.journal import parse_json

__all__ = [
    "MAX_PROOF",
    "MAX_REQUEST",
    "SIZE_TYPE",
    "AddCheckpoint",
    "LogState",
    "Witness",
    "witness_key",
]

#: the most consistency proof lines a request may carry (C2SP tlog-witness)
MAX_PROOF = 63
#: request bodies larger than this are refused (413): a checkpoint with a few signatures and
#: 63 proof lines is under 4 KiB
MAX_REQUEST = 64 * 1024
#: the content type of a 409 answer that carries the size the witness holds
SIZE_TYPE = "text/x.tlog.size"
#: refused log-signed requests kept as evidence of a fork, at most
MAX_KEPT = 1000
#: the name a witness's key goes by unless told otherwise
DEFAULT_NAME = "sagacity.local/witness"
KEY_FILE = "witness.pem"

_log = logging.getLogger(__name__)
_SIZE = re.compile(r"^(0|[1-9][0-9]{0,18})$")


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class AddCheckpoint:
    """An ``add-checkpoint`` request: the size the log believes the witness holds, the
    consistency proof from it, and the signed checkpoint note."""

    old: int
    proof: list[bytes]
    note: str

    def body(self) -> bytes:
        """The request body: ``old <n>``, one base64 hash a line, a blank line, the note."""
        lines = [f"old {self.old}\n", *(_b64(h) + "\n" for h in self.proof), "\n", self.note]
        return "".join(lines).encode("utf-8")

    @classmethod
    def parse(cls, body: bytes) -> AddCheckpoint:
        """The request ``body`` holds; :class:`WitnessRefused` (400) saying why it holds none."""
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise WitnessRefused(400, "the request body is not UTF-8 text") from None
        if "\x00" in text:
            raise WitnessRefused(400, "the request body holds a NUL byte")
        first, sep, rest = text.partition("\n")
        word, _, size = first.partition(" ")
        if not sep or word != "old" or not _SIZE.match(size):
            raise WitnessRefused(400, "the first line must be 'old <size>' (decimal)")
        proof: list[bytes] = []
        while True:
            line, sep, rest = rest.partition("\n")
            if not sep:
                raise WitnessRefused(400, "no blank line before the checkpoint")
            if not line:
                break
            if len(proof) == MAX_PROOF:
                raise WitnessRefused(400, f"more than {MAX_PROOF} consistency proof lines")
            try:
                digest = base64.b64decode(line, validate=True)
            except (binascii.Error, ValueError):
                raise WitnessRefused(400, f"proof line {len(proof) + 1} is not base64") from None
            if len(digest) != 32:
                raise WitnessRefused(400, f"proof line {len(proof) + 1} is not a 32-byte hash")
            proof.append(digest)
        return cls(int(size), proof, rest)


@dataclass(frozen=True, slots=True)
class LogState:
    """What a witness holds for one log: the latest head it cosigned, and that note."""

    origin: str
    size: int
    root: bytes
    note: str

    def document(self) -> dict[str, object]:
        """The state file's JSON object."""
        return {
            "origin": self.origin,
            "size": self.size,
            "root": _b64(self.root),
            "note": self.note,
        }


def witness_key(folder: Path) -> Ed25519PrivateKey:
    """The witness's key in ``folder`` (``witness.pem``), made on first use (mode 0600)."""
    path = folder / KEY_FILE
    if path.exists():
        return load_private_key(path)
    folder.mkdir(parents=True, exist_ok=True)
    return generate_key(path)


class Witness:
    """A witness over the logs it knows (their verifier keys), keeping its state in ``folder``."""

    def __init__(
        self,
        folder: Path,
        name: str,
        key: Ed25519PrivateKey,
        logs: Sequence[NoteKey],
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.folder = folder
        self.cosigner = WitnessCosigner(name, key, clock=clock)
        self.key = NoteKey(name, key.public_key(), COSIGNATURE_V1)
        self.logs = {log.name: log for log in logs}
        (folder / "logs").mkdir(parents=True, exist_ok=True)

    def add_checkpoint(self, body: bytes) -> str:
        """Check an ``add-checkpoint`` request and cosign its head: the cosignature line.

        :class:`WitnessRefused` with the protocol's status when it refuses; then nothing
        changed. A damaged state file refuses every request of that log (500) until an
        operator looks: cosigning past it could cosign a rollback.
        """
        request = AddCheckpoint.parse(body)
        try:
            head = note_head(request.note)
        except ValueError as exc:
            raise WitnessRefused(400, f"not a signed checkpoint: {exc}") from None
        log = self.logs.get(head.origin)
        if log is None:
            raise WitnessRefused(404, f"unknown log {head.origin!r}")
        try:
            open_note(request.note, log)
        except ValueError as exc:
            raise WitnessRefused(403, f"not signed by the log's key: {exc}") from None
        if request.old > head.size:
            raise WitnessRefused(
                400, f"old size {request.old} is above the checkpoint's {head.size}"
            )
        with self._locked():
            held = self.state(head.origin)
            try:
                self._check(held, request, head)
            except WitnessRefused as exc:
                if exc.status == 422 or (exc.status == 409 and exc.size is None):
                    self._keep(head.origin, body)
                raise
            line = self.cosigner(head.text())
            self._store(
                LogState(head.origin, head.size, head.root, self._cosigned(request.note, line))
            )
        return line

    def state(self, origin: str) -> LogState | None:
        """The latest head cosigned for ``origin`` (None: none); :class:`EvidenceUnavailable`
        when its state file is damaged."""
        path = self._path(origin)
        try:
            raw = parse_json(path.read_text(encoding="utf-8"))
            state = LogState(
                raw["origin"],
                raw["size"],
                base64.b64decode(raw["root"], validate=True),
                raw["note"],
            )
            if note_head(state.note) != TreeHead(origin, state.size, state.root):
                raise ValueError("its note is not of its own head")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise EvidenceUnavailable(f"the witness state {path} is damaged: {exc}") from None
        return state

    def _check(self, held: LogState | None, request: AddCheckpoint, head: TreeHead) -> None:
        size = 0 if held is None else held.size
        if request.old != size:
            raise WitnessRefused(
                409, f"this witness holds tree head {size}, not {request.old}", size=size
            )
        if held is None or size == 0:
            # a first head (or one after the empty tree): there is nothing it must extend
            if request.proof:
                raise WitnessRefused(422, "a proof from size 0 must be empty")
            if head.size == 0 and head.root != EMPTY_ROOT:
                raise WitnessRefused(422, "tree head 0 must have the empty tree's root")
            return
        if head.size == size:
            if request.proof:
                raise WitnessRefused(422, "a proof between equal sizes must be empty")
            if head.root != held.root:
                raise WitnessRefused(
                    409, f"a fork: tree head {size} was cosigned with another root"
                )
            return
        if not verify_consistency(size, head.size, held.root, head.root, request.proof):
            raise WitnessRefused(
                422, f"the proof does not show tree head {head.size} extends tree head {size}"
            )

    def _cosigned(self, note: str, line: str) -> str:
        # the note as submitted, less any earlier line of this witness, plus the new one
        own = f"\u2014 {self.key.name} "
        kept = [x for x in note.splitlines(keepends=True) if not x.startswith(own)]
        return "".join(kept) + line

    def _keep(self, origin: str, body: bytes) -> None:
        """Keep a log-signed request that forks or rewrites the log: the log's own signature on
        a head inconsistent with one it signed before is proof of its misbehaviour (C2SP lets a
        witness log it). Only notes the log's key signed get here; at most MAX_KEPT are kept."""
        folder = self.folder / "refused"
        try:
            folder.mkdir(exist_ok=True)
            if sum(1 for _ in folder.iterdir()) >= MAX_KEPT:
                return
            name = f"{self._path(origin).stem}-{time.time_ns()}.txt"
            (folder / name).write_bytes(body)
        except OSError as exc:  # keeping evidence must not turn a refusal into a failure
            _log.warning("witness: cannot keep a refused request in %s: %s", folder, exc)

    def _path(self, origin: str) -> Path:
        return self.folder / "logs" / f"{hashlib.sha256(origin.encode('utf-8')).hexdigest()}.json"

    @contextmanager
    def _locked(self) -> Iterator[None]:
        # flock: exclusive across threads (each opens its own descriptor) and processes
        fd = os.open(self.folder / "lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)

    def _store(self, state: LogState) -> None:
        path = self._path(state.origin)
        try:
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=path.parent, prefix=".state-", delete=False
            ) as tmp:
                json.dump(state.document(), tmp)
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp.name, path)
            folder = os.open(path.parent, os.O_RDONLY)
            try:
                os.fsync(folder)  # the rename itself survives a crash
            finally:
                os.close(folder)
        except OSError as exc:
            raise EvidenceUnavailable(f"cannot store the witness state {path}: {exc}") from None
