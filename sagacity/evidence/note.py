"""Signed tree heads as C2SP checkpoints (c2sp.org/tlog-checkpoint, signed-note, tlog-cosignature).

A checkpoint's text is three lines: the log's origin, the tree size, the base64 root hash. A
signed note is that text, a blank line, then one line per signature, ``— <key name>
<base64(4-byte key id || signature)>``. The log signs with Ed25519 (signature type 0x01) under
its origin as key name; more anchors add lines through the :class:`Cosigner` interface, such as
a witness's timestamped cosignature (type 0x04, :class:`WitnessCosigner`). Pure: standard library
and ``cryptography`` only, so an offline verifier reads notes with this module.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import struct
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

__all__ = [
    "Cosigner",
    "NoteKey",
    "NoteSigner",
    "OpenedNote",
    "TreeHead",
    "WitnessCosigner",
    "note_head",
    "open_note",
    "sign_note",
]

#: signed-note signature types
ED25519 = 0x01
COSIGNATURE_V1 = 0x04

_DASH = "\u2014 "
# origins and key names: no Unicode spaces, no "+", nothing below U+0020
_NAME = re.compile(r"^[^\s+\x00-\x1f]+$")
_SIZE = re.compile(r"^(0|[1-9][0-9]*)$")


@dataclass(frozen=True, slots=True)
class TreeHead:
    """A log's Merkle tree at ``size`` leaves: the checkpoint body, unsigned."""

    origin: str
    size: int
    root: bytes

    def text(self) -> str:
        """The checkpoint's note text: origin, size and base64 root, each ending in a newline."""
        return f"{self.origin}\n{self.size}\n{base64.b64encode(self.root).decode('ascii')}\n"

    @classmethod
    def parse(cls, text: str) -> TreeHead:
        """The tree head a note text holds; ``ValueError`` saying why when it holds none."""
        lines = text.split("\n")
        if len(lines) < 4 or lines[-1] != "":
            raise ValueError("a checkpoint is at least three lines, each ending in a newline")
        origin, size, root = lines[:3]
        if not _NAME.match(origin):
            raise ValueError(f"origin {origin!r} is empty or holds spaces, '+' or controls")
        if not _SIZE.match(size):
            raise ValueError(f"tree size {size!r} is not a decimal count")
        try:
            digest = base64.b64decode(root, validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"root hash {root!r} is not base64") from None
        if len(digest) != 32:
            raise ValueError(f"root hash is {len(digest)} bytes, not 32")
        # extension lines are allowed by the format, but this log writes none
        if lines[3:-1]:
            raise ValueError("unexpected extension lines after the root hash")
        return cls(origin, int(size), digest)


def key_id(name: str, signature_type: int, public: Ed25519PublicKey) -> bytes:
    """SHA-256(name || 0x0A || type || 32-byte public key), first 4 bytes (signed-note)."""
    raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([signature_type]) + raw).digest()[:4]


def _line(name: str, ident: bytes, signature: bytes) -> str:
    return f"{_DASH}{name} {base64.b64encode(ident + signature).decode('ascii')}\n"


class Cosigner(Protocol):
    """One anchor of a checkpoint: given the note text, return one signature line.

    The line is ``— <name> <base64(4-byte key id || opaque bytes)>\\n``. Verifiers that do not
    know the (name, key id) pair ignore it (signed-note), so any anchor fits: a witness's
    cosignature, or an RFC 3161 timestamp token over the text (signature type 0xff). The
    log's own signature is one too (:class:`NoteSigner`).
    """

    def __call__(self, text: str) -> str: ...


class NoteSigner:
    """Signs note texts with an Ed25519 key under ``name`` (signature type 0x01)."""

    def __init__(self, name: str, key: Ed25519PrivateKey) -> None:
        if not _NAME.match(name):
            raise ValueError(f"key name {name!r} is empty or holds spaces, '+' or controls")
        self.name = name
        self.key = key
        self.id = key_id(name, ED25519, key.public_key())

    def __call__(self, text: str) -> str:
        return _line(self.name, self.id, self.key.sign(text.encode("utf-8")))


def _cosigned_message(text: str, timestamp: int) -> bytes:
    return f"cosignature/v1\ntime {timestamp}\n{text}".encode()


class WitnessCosigner:
    """A witness's key: Ed25519 ``cosignature/v1`` lines (type 0x04) stating when it saw the head.

    It signs what it is given: the checks that make a cosignature mean something (the log's
    signature, consistency with the last head seen) are the witness server's
    (:class:`sagacity.evidence.witness.Witness`), which signs with this.
    """

    def __init__(
        self, name: str, key: Ed25519PrivateKey, *, clock: Callable[[], float] = time.time
    ) -> None:
        if not _NAME.match(name):
            raise ValueError(f"key name {name!r} is empty or holds spaces, '+' or controls")
        self.name = name
        self.key = key
        self.id = key_id(name, COSIGNATURE_V1, key.public_key())
        self._clock = clock

    def __call__(self, text: str) -> str:
        timestamp = int(self._clock())
        signature = self.key.sign(_cosigned_message(text, timestamp))
        return _line(self.name, self.id, struct.pack(">Q", timestamp) + signature)


@dataclass(frozen=True, slots=True)
class NoteKey:
    """A key a verifier trusts: its name, public key and signature type (0x01 for the log's,
    0x04 for a witness's cosignatures)."""

    name: str
    public: Ed25519PublicKey
    type: int = ED25519

    @property
    def id(self) -> bytes:
        return key_id(self.name, self.type, self.public)

    def vkey(self) -> str:
        """The key as a signed-note verifier key: ``<name>+<hex key id>+<base64(type || key)>``."""
        raw = self.public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        encoded = base64.b64encode(bytes([self.type]) + raw).decode("ascii")
        return f"{self.name}+{self.id.hex()}+{encoded}"

    @classmethod
    def parse(cls, vkey: str) -> NoteKey:
        """The key a verifier key string (:meth:`vkey`'s form) names; ``ValueError`` saying why
        when it is not one: a bad name, an unknown type, or a key id that does not match."""
        name, _, rest = vkey.partition("+")
        ident, _, encoded = rest.partition("+")
        if not _NAME.match(name):
            raise ValueError(f"{vkey[:60]!r} is not <name>+<hex key id>+<base64 key>")
        try:
            raw = base64.b64decode(encoded, validate=True)
            expected = bytes.fromhex(ident)
        except (binascii.Error, ValueError):
            raise ValueError(
                f"verifier key {name!r}: the key id or key is not hex/base64"
            ) from None
        if len(raw) != 33 or raw[0] not in (ED25519, COSIGNATURE_V1):
            raise ValueError(f"verifier key {name!r}: not an Ed25519 key (type 0x01 or 0x04)")
        key = cls(name, Ed25519PublicKey.from_public_bytes(raw[1:]), raw[0])
        if key.id != expected:
            raise ValueError(f"verifier key {name!r}: key id {ident} does not match the key")
        return key

    def verifies(self, text: str, signature: bytes) -> bool:
        """Whether ``signature`` (the line's bytes after the key id) is this key's over ``text``."""
        message = text.encode("utf-8")
        if self.type == COSIGNATURE_V1:
            if len(signature) != 8 + 64:
                return False
            message = _cosigned_message(text, _timestamp(signature))
            signature = signature[8:]
        try:
            self.public.verify(signature, message)
        except InvalidSignature:
            return False
        return True


def _timestamp(cosignature: bytes) -> int:
    stamp: int = struct.unpack(">Q", cosignature[:8])[0]
    return stamp


@dataclass(frozen=True, slots=True)
class OpenedNote:
    """A note whose log signature verified: its tree head, and who else vouched for it when."""

    head: TreeHead
    text: str
    #: each trusted witness that signed, by name, with its cosignature's time (POSIX seconds)
    witnessed: dict[str, int | None]


def sign_note(head: TreeHead, signers: Sequence[Cosigner]) -> str:
    """The signed note of ``head``: its text, a blank line, one line from each signer."""
    text = head.text()
    return text + "\n" + "".join(signer(text) for signer in signers)


def _signature_lines(note: str) -> tuple[str, list[tuple[str, bytes]]]:
    if any(ch < " " and ch != "\n" for ch in note):
        raise ValueError("a note holds no control characters but newlines")
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        raise ValueError("no blank line between the text and the signatures")
    text, lines = note[: split + 1], note[split + 2 : -1].split("\n")
    parsed = []
    for line in lines:
        if not line.startswith(_DASH):
            raise ValueError(f"signature line {line[:40]!r} does not start with an em dash")
        parts = line[len(_DASH) :].split(" ")
        if len(parts) != 2 or not _NAME.match(parts[0]):
            raise ValueError(f"signature line {line[:40]!r} is not '— <name> <signature>'")
        try:
            raw = base64.b64decode(parts[1], validate=True)
        except (binascii.Error, ValueError):
            raise ValueError(f"signature of {parts[0]!r} is not base64") from None
        if len(raw) < 5:
            raise ValueError(f"signature of {parts[0]!r} is too short")
        parsed.append((parts[0], raw))
    return text, parsed


def note_head(note: str) -> TreeHead:
    """The tree head ``note`` holds, its signatures not checked; ``ValueError`` when it is not a
    well-formed signed checkpoint."""
    text, _ = _signature_lines(note)
    return TreeHead.parse(text)


def open_note(
    note: str, log_key: NoteKey, witnesses: Iterable[NoteKey] = (), *, quorum: int | None = None
) -> OpenedNote:
    """Check ``note``: ``ValueError`` unless ``log_key`` signed it and each of ``witnesses``
    cosigned it (at least ``quorum`` of them, when given); lines of other keys are ignored, a
    bad line of a known key fails the note."""
    witnesses = tuple(witnesses)
    text, lines = _signature_lines(note)
    head = TreeHead.parse(text)
    if head.origin != log_key.name:
        raise ValueError(f"a checkpoint of log {head.origin!r}, not of {log_key.name!r}")
    known = {(key.name, key.id): key for key in (log_key, *witnesses)}
    signed = False
    witnessed: dict[str, int | None] = {}
    for name, raw in lines:
        key = known.get((name, raw[:4]))
        if key is None:
            continue
        if not key.verifies(text, raw[4:]):
            raise ValueError(f"the signature of {name!r} does not verify")
        if key is log_key:
            signed = True
        else:
            witnessed[name] = _timestamp(raw[4:]) if key.type == COSIGNATURE_V1 else None
    if not signed:
        raise ValueError(f"no signature of the trusted key {log_key.vkey()}")
    missing = sorted(key.name for key in witnesses if key.name not in witnessed)
    if quorum is not None:
        if len(witnessed) < quorum:
            raise ValueError(
                f"{len(witnessed)} of the {quorum} witness cosignatures required"
                + (f" (none of {', '.join(missing)})" if missing else "")
            )
    elif missing:
        raise ValueError(f"no cosignature of witness {', '.join(missing)}")
    return OpenedNote(head, text, witnessed)
