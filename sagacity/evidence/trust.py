"""Trust roots: the keys a verifier accepts, pinned out of band in a trust file, never found beside
the data they vouch for.

A trust file (``SAGACITY_TRUST_FILE``, ``--trust FILE``) is one JSON object:

```json
{"format": "sagacity-trust", "version": 1,
 "signers": [{"name": "sagacity-dev", "public_key": "<base64 of 32 raw bytes>"}],
 "witnesses": [{"name": "witness.local/w1", "public_key": "<base64>", "url": "http://127.0.0.1:7380"}],
 "witness_quorum": 1}
```

``signers`` are the keys that may sign checkpoints, seals and tree heads (a key rotated to from one
of them by a statement the old key signed is trusted too: :mod:`sagacity.evidence.rotation`);
``witnesses`` the C2SP witnesses whose cosignatures count, with where to reach them;
``witness_quorum`` how many of them must cosign a tree head for it to count as witnessed (0: none
required).

A trust root is only worth what its location is: :func:`worker_writable` tells whether a path
lies in a folder the workers write (their checkpoint folder or their signing key's folder),
where whoever can write those could replace it along with the data it vouches for.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.keys import key_id
from sagacity.evidence.note import COSIGNATURE_V1, NoteKey
from sagacity.journal import parse_json

__all__ = [
    "TRUST_FORMAT",
    "TrustRoots",
    "TrustedKey",
    "TrustedWitness",
    "fingerprint",
    "load_trust",
    "raw_public",
    "trust_document",
    "witness_from_vkey",
    "worker_writable",
    "write_trust",
]

TRUST_FORMAT = "sagacity-trust"


def raw_public(key: Ed25519PublicKey) -> bytes:
    """``key``'s 32 raw bytes."""
    return key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)


def fingerprint(key: Ed25519PublicKey) -> str:
    """``key``'s full fingerprint: 64 hex digits of SHA-256 over its 32 raw bytes (the key id
    checkpoints carry is its first 16)."""
    return hashlib.sha256(raw_public(key)).hexdigest()


@dataclass(frozen=True)
class TrustedKey:
    """A key pinned to sign checkpoints, seals and tree heads."""

    name: str
    key: Ed25519PublicKey

    @property
    def key_id(self) -> str:
        """The checkpoint fingerprint (first 16 hex digits of SHA-256 of the raw key)."""
        return key_id(self.key)


@dataclass(frozen=True)
class TrustedWitness:
    """A witness whose cosignatures count: its note key name, public key and address."""

    name: str
    key: Ed25519PublicKey
    url: str | None = None


@dataclass(frozen=True)
class TrustRoots:
    """What a verifier trusts, as pinned by its trust file."""

    signers: tuple[TrustedKey, ...]
    witnesses: tuple[TrustedWitness, ...] = ()
    witness_quorum: int = 0
    source: Path | None = field(default=None, compare=False)

    @classmethod
    def of_key(
        cls, key: Ed25519PublicKey, *, name: str = "pinned", source: Path | None = None
    ) -> TrustRoots:
        """Roots that trust ``key`` alone (a key handed to the verifier on its command line)."""
        return cls((TrustedKey(name, key),), source=source)

    def signer_keys(self) -> dict[str, Ed25519PublicKey]:
        """The pinned signer keys by checkpoint key id."""
        return {signer.key_id: signer.key for signer in self.signers}

    def describe(self) -> str:
        """One line naming the pinned keys and where they were pinned."""
        keys = ", ".join(f"{s.name} {s.key_id}" for s in self.signers)
        where = f" (pinned by {self.source})" if self.source else ""
        quorum = (
            f"; {self.witness_quorum} of {len(self.witnesses)} witnesses must cosign"
            if self.witnesses
            else ""
        )
        return f"trusted keys {keys}{where}{quorum}"


def worker_writable(path: Path, worker_folders: Iterable[Path | None]) -> Path | None:
    """The folder of ``worker_folders`` that ``path`` lies in (symlinks resolved), or None.

    Those are the folders the workers write (their checkpoint folder, their signing key's
    folder): a key or trust file found there can be swapped by whoever can write them, together
    with the checkpoints it would vouch for.
    """
    target = path.resolve()
    for folder in worker_folders:
        if folder is None:
            continue
        root = folder.resolve()
        if target == root or root in target.parents:
            return folder
    return None


def _key(value: object, where: str) -> Ed25519PublicKey:
    if not isinstance(value, str):
        raise EvidenceUnavailable(f"{where}: public_key must be base64 text")
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise EvidenceUnavailable(f"{where}: public_key is not base64") from None
    if len(raw) != 32:
        raise EvidenceUnavailable(f"{where}: public_key is {len(raw)} bytes, not 32")
    return Ed25519PublicKey.from_public_bytes(raw)


def _name(entry: dict[str, object], where: str) -> str:
    name = entry.get("name")
    if not isinstance(name, str) or not name or any(c.isspace() or c == "+" for c in name):
        raise EvidenceUnavailable(f"{where}: name must be non-empty text with no space or '+'")
    return name


def witness_from_vkey(vkey: str, url: str | None = None) -> TrustedWitness:
    """A witness from its signed-note verifier key, ``<name>+<hex key id>+<base64(0x04 || key)>``;
    :class:`EvidenceUnavailable` saying what is wrong with it."""
    try:
        key = NoteKey.parse(vkey)
    except ValueError as exc:
        raise EvidenceUnavailable(f"{vkey!r} is not a witness's verifier key: {exc}") from None
    if key.type != COSIGNATURE_V1:
        raise EvidenceUnavailable(
            f"{vkey!r} is a log's verifier key (type 0x01), not a witness's (0x04)"
        )
    return TrustedWitness(key.name, key.public, url)


def load_trust(path: Path) -> TrustRoots:
    """Read and check a trust file; :class:`EvidenceUnavailable` names what is wrong with it."""
    try:
        document = parse_json(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EvidenceUnavailable(f"cannot read the trust file {path}: {exc}") from None
    except ValueError as exc:
        raise EvidenceUnavailable(f"the trust file {path} is not JSON: {exc}") from None
    if not isinstance(document, dict) or document.get("format") != TRUST_FORMAT:
        raise EvidenceUnavailable(f"{path}: not a trust file (format must be {TRUST_FORMAT!r})")
    if document.get("version") != 1:
        raise EvidenceUnavailable(f"{path}: unknown trust file version {document.get('version')!r}")
    signers: list[TrustedKey] = []
    for n, entry in enumerate(document.get("signers") or []):
        where = f"{path}: signers[{n}]"
        if not isinstance(entry, dict):
            raise EvidenceUnavailable(f"{where}: must be an object")
        signers.append(TrustedKey(_name(entry, where), _key(entry.get("public_key"), where)))
    witnesses: list[TrustedWitness] = []
    for n, entry in enumerate(document.get("witnesses") or []):
        where = f"{path}: witnesses[{n}]"
        if not isinstance(entry, dict):
            raise EvidenceUnavailable(f"{where}: must be an object")
        url = entry.get("url")
        if url is not None and not isinstance(url, str):
            raise EvidenceUnavailable(f"{where}: url must be text")
        witnesses.append(
            TrustedWitness(_name(entry, where), _key(entry.get("public_key"), where), url)
        )
    quorum = document.get("witness_quorum", 0)
    if not isinstance(quorum, int) or isinstance(quorum, bool) or not 0 <= quorum <= len(witnesses):
        raise EvidenceUnavailable(
            f"{path}: witness_quorum must be a whole number from 0 to {len(witnesses)}"
        )
    if not signers:
        raise EvidenceUnavailable(f"{path}: names no signer key")
    return TrustRoots(tuple(signers), tuple(witnesses), quorum, source=path)


def trust_document(
    signers: Sequence[TrustedKey], witnesses: Sequence[TrustedWitness] = (), quorum: int = 0
) -> dict[str, object]:
    """The JSON object of a trust file pinning these keys."""
    return {
        "format": TRUST_FORMAT,
        "version": 1,
        "signers": [
            {"name": s.name, "public_key": base64.b64encode(raw_public(s.key)).decode()}
            for s in signers
        ],
        "witnesses": [
            {
                "name": w.name,
                "public_key": base64.b64encode(raw_public(w.key)).decode(),
                **({"url": w.url} if w.url else {}),
            }
            for w in witnesses
        ],
        "witness_quorum": quorum,
    }


def write_trust(path: Path, roots: TrustRoots) -> None:
    """Write ``roots`` as a trust file, read-only (0444): whoever rewrites it must mean to."""
    text = json.dumps(
        trust_document(roots.signers, roots.witnesses, roots.witness_quorum), indent=2
    )
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    tmp.write_text(text + "\n", encoding="utf-8")
    tmp.chmod(0o444)
    tmp.replace(path)
