"""Signed checkpoints of chain heads, kept as files outside the database.

A checkpoint says "saga S had row ``seq`` hashed ``hash`` at time ``at``", signed with Ed25519.
Whoever can rewrite the journal table cannot rewrite these (keep the directory on other storage,
with other owners), so a journal that was truncated, deleted or rewritten with every hash
recomputed no longer matches them. A *seal* says more: the saga ended there, so no row may
follow it.

Each saga has one append-only log, ``<dir>/<name>.jsonl``, one signed checkpoint per line; a
line is written with a single ``O_APPEND`` write. Standard library, ``cryptography`` and the
journal core only: an offline verifier reads bundles with this module.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import os
import stat
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from enum import StrEnum
from pathlib import Path
from urllib.parse import quote, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.keys import key_id, load_private_key
from sagacity.journal import format_timestamp, parse_json, to_json

__all__ = [
    "Checkpoint",
    "CheckpointDir",
    "CheckpointLog",
    "CheckpointWriter",
    "Kind",
    "log_name",
]

#: Prefix of every signed message; changes only with the checkpoint format.
DOMAIN = b"sagacity-checkpoint-v1\n"
SUFFIX = ".jsonl"
# Names longer than this are replaced by a digest: file systems cap names at 255 bytes.
_MAX_NAME = 150
# quote() encodes "+", so no readable name starts with it: digest names cannot collide.
_DIGEST_PREFIX = "+"


class Kind(StrEnum):
    """What a checkpoint records."""

    HEAD = "head"  # the chain's head after an append
    PURGED = "purged"  # retention exported the saga (``bundle``) and deleted its rows
    SEALED = "sealed"  # the saga ended (``state``) at this head: no row may follow it


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One signed statement about a saga's head. ``signature`` covers every other field."""

    saga_id: str
    seq: int
    hash: str
    at: str
    kind: Kind
    key_id: str
    #: SHA-256 of the bundle's manifest, for ``PURGED``
    bundle: str | None = None
    signature: str = ""
    #: how the saga ended, for ``SEALED`` (completed, compensated, compensation_failed, aborted)
    state: str | None = None

    def body(self) -> dict[str, object]:
        """Every field but the signature (``state`` only when set: older lines lack it)."""
        body = {name: getattr(self, name) for name in _SIGNED}
        if self.state is not None:
            body["state"] = self.state
        return body

    def message(self) -> bytes:
        """The signed bytes: the domain tag, then canonical JSON of :meth:`body`."""
        return DOMAIN + to_json(self.body()).encode("utf-8")

    def line(self) -> str:
        """The log line (no newline) for this checkpoint."""
        return to_json({**self.body(), "signature": self.signature})

    def verify(self, keys: Mapping[str, Ed25519PublicKey]) -> str | None:
        """None when one of the trusted ``keys`` (by key id) signed this; otherwise why not."""
        key = keys.get(self.key_id)
        if key is None:
            trusted = ", ".join(keys) or "none"
            plural = "s" if len(keys) > 1 else ""
            return f"signed by key {self.key_id}, not by the trusted key{plural} {trusted}"
        try:
            key.verify(base64.b64decode(self.signature, validate=True), self.message())
        except (InvalidSignature, binascii.Error, ValueError):
            return "the signature does not verify"
        return None


_SIGNED = ("saga_id", "seq", "hash", "at", "kind", "key_id", "bundle")


def sign(
    key: Ed25519PrivateKey,
    saga_id: str,
    seq: int,
    hash: str,
    *,
    kind: Kind = Kind.HEAD,
    bundle: str | None = None,
    state: str | None = None,
    at: datetime | None = None,
    signer_id: str | None = None,
) -> Checkpoint:
    """A checkpoint of ``saga_id`` at ``seq``/``hash``, signed by ``key`` (``at``: now).

    ``signer_id`` is ``key``'s fingerprint, when the caller has it at hand.
    """
    unsigned = Checkpoint(
        saga_id=saga_id,
        seq=seq,
        hash=hash,
        at=format_timestamp(at or datetime.now(UTC)),
        kind=kind,
        key_id=signer_id or key_id(key.public_key()),
        bundle=bundle,
        state=state,
    )
    signature = base64.b64encode(key.sign(unsigned.message())).decode("ascii")
    return replace(unsigned, signature=signature)


def parse_line(line: str) -> Checkpoint:
    """The checkpoint a log line holds (signature not checked); ``ValueError`` saying why not."""
    try:
        raw = parse_json(line)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ValueError("not a JSON object")
    try:
        cp = Checkpoint(
            saga_id=raw["saga_id"],
            seq=raw["seq"],
            hash=raw["hash"],
            at=raw["at"],
            kind=Kind(raw["kind"]),
            key_id=raw["key_id"],
            bundle=raw.get("bundle"),
            signature=raw["signature"],
            state=raw.get("state"),
        )
    except KeyError as exc:
        raise ValueError(f"field {exc} is missing") from None
    extra = set(raw) - {*_SIGNED, "signature", "state"}
    if extra:
        raise ValueError(f"unexpected fields {sorted(extra)}")
    if not isinstance(cp.seq, int) or isinstance(cp.seq, bool) or cp.seq < 0:
        raise ValueError(f"seq {cp.seq!r} is not a count")
    for name in ("saga_id", "hash", "at", "key_id", "signature"):
        if not isinstance(getattr(cp, name), str):
            raise ValueError(f"{name} is not a string")
    if (cp.kind is Kind.SEALED) != isinstance(cp.state, str):
        raise ValueError("a seal, and only a seal, names the state the saga ended in")
    return cp


def log_name(saga_id: str) -> str:
    """File name of ``saga_id``'s log: the id percent-encoded, or a digest when that is long."""
    name = quote(saga_id, safe="")
    if len(name) > _MAX_NAME:
        name = _DIGEST_PREFIX + hashlib.sha256(saga_id.encode("utf-8")).hexdigest()
    return name + SUFFIX


class CheckpointLog:
    """One saga's checkpoints. Signatures are checked when a checkpoint is used.

    Verifying a saga that is intact needs only its latest signed head (the chain vouches for
    every row below it), so :meth:`latest` checks one signature; :meth:`verified` checks them all,
    for locating a change. Lines found damaged, forged or contradictory go to ``problems``.
    """

    def __init__(
        self,
        saga_id: str,
        lines: list[tuple[str, Checkpoint]] | None = None,
        check: Callable[[Checkpoint], str | None] | None = None,
        problems: list[str] | None = None,
    ) -> None:
        self.saga_id = saga_id
        #: (where, checkpoint) by seq, signatures not yet checked
        self._lines = sorted(lines or [], key=lambda line: line[1].seq)
        self._check = check
        self._verdicts: dict[int, bool] = {}
        self.problems = problems or []

    @property
    def seqs(self) -> set[int]:
        """Every seq some line claims to checkpoint."""
        return {cp.seq for _, cp in self._lines}

    def _valid(self, index: int) -> bool:
        if index not in self._verdicts:
            where, cp = self._lines[index]
            refusal = None if self._check is None else self._check(cp)
            if refusal is not None:
                self.problems.append(f"{where}: forged checkpoint: {refusal}")
            self._verdicts[index] = refusal is None
        return self._verdicts[index]

    def latest(self) -> Checkpoint | None:
        """The highest-seq checkpoint that verifies; forged lines above it become problems."""
        for index in reversed(range(len(self._lines))):
            if self._valid(index):
                return self._lines[index][1]
        return None

    def signed(self, lowest: int = 0) -> Iterator[Checkpoint]:
        """The checkpoints at ``lowest`` or above that verify, highest seq first, each signature
        checked when reached."""
        for index in reversed(range(len(self._lines))):
            if self._lines[index][1].seq < lowest:
                return
            if self._valid(index):
                yield self._lines[index][1]

    def seal(self) -> Checkpoint | None:
        """The seal in force: the highest signed seal, unless a head was signed above it.

        A head above a seal means the saga went on after it ended (reset to an earlier point,
        by someone holding the signing key); the new end seals again.
        """
        ceiling: int | None = None  # seq of the highest head that verifies
        for index in reversed(range(len(self._lines))):
            cp = self._lines[index][1]
            if ceiling is not None and cp.seq < ceiling:
                return None
            if cp.kind is Kind.SEALED and self._valid(index):
                return cp
            if cp.kind is Kind.HEAD and ceiling is None and self._valid(index):
                ceiling = cp.seq
        return None

    def verified(self) -> list[Checkpoint]:
        """Every checkpoint that verifies, one per seq; two signed heads for a seq is a problem."""
        by_seq: dict[int, Checkpoint] = {}
        for index, (where, cp) in enumerate(self._lines):
            if not self._valid(index):
                continue
            held = by_seq.get(cp.seq)
            if held is not None and held.hash != cp.hash:
                self.problems.append(
                    f"{where}: two signed heads for seq {cp.seq} ({held.hash[:12]}… "
                    f"and {cp.hash[:12]}…): the chain was forked"
                )
            elif held is None or cp.kind is Kind.PURGED:
                by_seq[cp.seq] = cp
        return list(by_seq.values())


class _NotRegular(OSError):
    """The checkpoint log's path holds something other than a regular file."""


def _read_regular(file: Path) -> bytes:
    """``file``'s bytes, when it is a regular file: judged on the descriptor read, so that a
    pipe put in its place (by someone who can write the folder) neither blocks the reader nor
    is read (opening it does not wait for a writer)."""
    fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise _NotRegular(file)
        with os.fdopen(fd, "rb", closefd=False) as opened:
            return opened.read()
    finally:
        os.close(fd)


class CheckpointDir:
    """Reads a checkpoint directory (or a bundle's copy), trusting only the signatures of ``key``
    (or of each key of a mapping by key id: the pinned keys and those they rotated to)."""

    def __init__(self, path: Path, key: Ed25519PublicKey | Mapping[str, Ed25519PublicKey]) -> None:
        self.path = path
        self.keys = {key_id(key): key} if isinstance(key, Ed25519PublicKey) else dict(key)
        if not self.keys:
            raise EvidenceUnavailable(f"no trusted key to check the checkpoints in {path} with")
        #: the first trusted key (the one named when a single key is meant)
        self.key_id, self.key = next(iter(self.keys.items()))

    def log_path(self, saga_id: str) -> Path:
        return self.path / log_name(saga_id)

    def load(self, saga_id: str) -> CheckpointLog:
        """``saga_id``'s checkpoints; an empty log when it has none."""
        file = self.log_path(saga_id)
        try:
            text = _read_regular(file).decode("utf-8")
        except FileNotFoundError:
            return CheckpointLog(saga_id)
        except _NotRegular:
            return CheckpointLog(saga_id, problems=[f"{file.name}: not a regular file"])
        except (OSError, UnicodeDecodeError) as exc:
            return CheckpointLog(saga_id, problems=[f"{file.name}: unreadable: {exc}"])
        lines: list[tuple[str, Checkpoint]] = []
        problems = []
        # lines end at "\n" only: canonical JSON leaves U+2028 and friends unescaped in a saga
        # id, and str.splitlines would break a line there
        lines_ = text.split("\n")
        if lines_[-1] == "":
            lines_.pop()  # the empty text after the last newline
        for number, line in enumerate(lines_, start=1):
            where = f"{file.name} line {number}"
            try:
                cp = parse_line(line)
            except ValueError as exc:
                problems.append(f"{where}: damaged checkpoint: {exc}")
                continue
            if cp.saga_id != saga_id:
                problems.append(f"{where}: a checkpoint of saga {cp.saga_id!r}, not this one")
            else:
                lines.append((where, cp))
        return CheckpointLog(saga_id, lines, lambda cp: cp.verify(self.keys), problems)

    def saga_ids(self) -> Iterator[str]:
        """Every saga with a log here (a digest-named log is opened to learn its saga)."""
        if not self.path.is_dir():
            return
        for file in sorted(self.path.iterdir()):
            if not file.name.endswith(SUFFIX):
                continue
            stem = file.name.removesuffix(SUFFIX)
            if not stem.startswith(_DIGEST_PREFIX):
                yield unquote(stem)
                continue
            saga_id = _first_saga_id(file)
            yield saga_id if saga_id is not None else stem


def _first_saga_id(file: Path) -> str | None:
    try:
        text = _read_regular(file).decode("utf-8")
    except (OSError, UnicodeDecodeError):
        return None  # a pipe in the log's place included: named by its file name, never waited on
    for line in text.split("\n"):
        try:
            return parse_line(line).saga_id
        except ValueError:
            continue
    return None


class CheckpointWriter:
    """Appends signed checkpoints; :meth:`record` is the one call a worker makes after an append."""

    def __init__(self, path: Path, key: Ed25519PrivateKey) -> None:
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise EvidenceUnavailable(f"cannot create checkpoint directory {path}: {exc}") from None
        self.path = path
        self.key = key
        self.key_id = key_id(key.public_key())

    @classmethod
    def open(cls, path: Path | None, signing_key: Path | None) -> CheckpointWriter | None:
        """A writer when both settings are given; None when neither is (checkpoints are off)."""
        if path is None and signing_key is None:
            return None
        if path is None or signing_key is None:
            missing = "SAGACITY_CHECKPOINT_DIR" if path is None else "SAGACITY_SIGNING_KEY"
            raise EvidenceUnavailable(f"checkpoints need both settings; {missing} is not set")
        return cls(path, load_private_key(signing_key))

    def record(self, saga_id: str, seq: int, hash: str) -> Checkpoint:
        """Sign and append the head ``seq``/``hash`` of ``saga_id``'s chain."""
        return self._append(sign(self.key, saga_id, seq, hash, signer_id=self.key_id))

    def seal(self, saga_id: str, seq: int, hash: str, state: str) -> Checkpoint:
        """Seal ``saga_id``'s final head ``seq``/``hash``: it ended there, in ``state``."""
        signed = sign(
            self.key, saga_id, seq, hash, kind=Kind.SEALED, state=state, signer_id=self.key_id
        )
        return self._append(signed)

    def purged(self, saga_id: str, seq: int, hash: str, bundle: str) -> Checkpoint:
        """Record that retention exported ``saga_id`` (head ``seq``/``hash``) to ``bundle``."""
        signed = sign(
            self.key, saga_id, seq, hash, kind=Kind.PURGED, bundle=bundle, signer_id=self.key_id
        )
        return self._append(signed)

    def _append(self, cp: Checkpoint) -> Checkpoint:
        data = (cp.line() + "\n").encode("utf-8")
        file = self.path / log_name(cp.saga_id)
        try:
            # one write() on an O_APPEND descriptor: concurrent writers never interleave lines
            fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as exc:
            raise EvidenceUnavailable(f"cannot write checkpoint {file}: {exc}") from None
        return cp
