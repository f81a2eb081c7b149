"""Key rotation: a statement, signed by the key in use, naming the key that signs from now on.

A verifier trusts the keys its trust file pins (:mod:`sagacity.evidence.trust`) and, through
these statements, the keys those keys rotated to — never a key merely found beside the data. The
statements live in ``<checkpoint dir>/keys/rotations.jsonl`` (a folder of their own: no saga's
checkpoint file can be named like it), one JSON object a line:

```json
{"at":"2026-12-06T01:02:03.000000Z","from":"86eb7e6af8b6c23d","signature":"…","to":"<base64 of the new key's 32 raw bytes>"}
```

``signature`` is the base64 Ed25519 signature, by the key whose key id is ``from``, of
``sagacity-key-rotation-v1\\n`` followed by the canonical JSON (sorted keys, no spaces, UTF-8) of
the other three fields. Whoever can write the folder can delete a statement (then the new key's
checkpoints fail as untrusted: loud, not silent) but cannot make one without the old key.
"""

from __future__ import annotations

import base64
import binascii
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.keys import key_id
from sagacity.evidence.trust import raw_public
from sagacity.journal import format_timestamp, parse_json, to_json

__all__ = ["ROTATIONS", "Rotation", "record_rotation", "trusted_keys"]

#: The file of rotation statements, under the checkpoint folder.
ROTATIONS = "keys/rotations.jsonl"
DOMAIN = b"sagacity-key-rotation-v1\n"


@dataclass(frozen=True)
class Rotation:
    """``from_id``'s statement that ``to`` signs from ``at`` on."""

    from_id: str
    to: Ed25519PublicKey
    at: str
    signature: str = ""

    def body(self) -> dict[str, str]:
        """The signed fields."""
        return {
            "at": self.at,
            "from": self.from_id,
            "to": base64.b64encode(raw_public(self.to)).decode("ascii"),
        }

    def message(self) -> bytes:
        """The signed bytes: the domain tag, then the canonical JSON of :meth:`body`."""
        return DOMAIN + to_json(self.body()).encode("utf-8")

    def line(self) -> str:
        """The statement as one line of ``keys/rotations.jsonl`` (no newline)."""
        return to_json({**self.body(), "signature": self.signature})

    @classmethod
    def parse(cls, line: str) -> Rotation:
        """The statement a line holds (signature not checked); ``ValueError`` saying why not."""
        raw = parse_json(line)
        if not isinstance(raw, dict) or set(raw) != {"at", "from", "signature", "to"}:
            raise ValueError("not an object with exactly at, from, signature and to")
        if not all(isinstance(value, str) for value in raw.values()):
            raise ValueError("every field must be text")
        try:
            to = Ed25519PublicKey.from_public_bytes(base64.b64decode(raw["to"], validate=True))
        except (binascii.Error, ValueError):
            raise ValueError("'to' is not a base64 Ed25519 public key") from None
        return cls(raw["from"], to, raw["at"], raw["signature"])

    def signed_by(self, key: Ed25519PublicKey) -> bool:
        """Whether ``key`` made this statement."""
        try:
            key.verify(base64.b64decode(self.signature, validate=True), self.message())
        except (InvalidSignature, binascii.Error, ValueError):
            return False
        return key_id(key) == self.from_id


def record_rotation(
    checkpoint_dir: Path,
    old: Ed25519PrivateKey,
    new: Ed25519PublicKey,
    *,
    at: datetime | None = None,
) -> Rotation:
    """Sign with ``old`` that ``new`` signs from now on, and append it to the folder's
    ``keys/rotations.jsonl`` (one ``O_APPEND`` write)."""
    unsigned = Rotation(key_id(old.public_key()), new, format_timestamp(at or datetime.now(UTC)))
    signature = base64.b64encode(old.sign(unsigned.message())).decode("ascii")
    statement = Rotation(unsigned.from_id, new, unsigned.at, signature)
    file = checkpoint_dir / ROTATIONS
    try:
        file.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (statement.line() + "\n").encode("utf-8"))
        finally:
            os.close(fd)
    except OSError as exc:
        raise EvidenceUnavailable(f"cannot write the rotation to {file}: {exc}") from None
    return statement


def trusted_keys(
    pinned: Mapping[str, Ed25519PublicKey], checkpoint_dir: Path | None
) -> tuple[dict[str, Ed25519PublicKey], list[str]]:
    """The pinned keys and every key they rotated to (transitively), by key id; and problems:
    statements that are damaged or not signed by a key trusted by then (ignored)."""
    keys = dict(pinned)
    problems: list[str] = []
    if checkpoint_dir is None:
        return keys, problems
    file = checkpoint_dir / ROTATIONS
    try:
        text = file.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return keys, problems
    except (OSError, UnicodeDecodeError) as exc:
        return keys, [f"{ROTATIONS}: unreadable: {exc}"]
    pending: list[tuple[int, Rotation]] = []
    lines_ = text.split("\n")
    if lines_[-1] == "":
        lines_.pop()  # the empty text after the last newline
    for number, line in enumerate(lines_, start=1):
        try:
            pending.append((number, Rotation.parse(line)))
        except ValueError as exc:
            problems.append(f"{ROTATIONS} line {number}: damaged: {exc}")
    # a chain of rotations may be written in any order: take statements until none is added
    progress = True
    while pending and progress:
        progress = False
        for item in list(pending):
            number, rotation = item
            signer = keys.get(rotation.from_id)
            if signer is not None and rotation.signed_by(signer):
                keys.setdefault(key_id(rotation.to), rotation.to)
                pending.remove(item)
                progress = True
    for number, rotation in pending:
        problems.append(
            f"{ROTATIONS} line {number}: a rotation from key {rotation.from_id} to "
            f"{key_id(rotation.to)} not signed by a trusted key: ignored"
        )
    return keys, problems
