"""Keys: Ed25519 keys that sign checkpoints (generate, load, name them by fingerprint), and the
secret key redaction fingerprints are keyed with.

Private keys are PKCS#8 PEM files readable by their owner only; public keys are
SubjectPublicKeyInfo PEM, the form a verifier is handed out of band. A fingerprint key file holds
32 random bytes as 64 hex digits, readable by its owner only.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.redaction import FingerprintKey

__all__ = [
    "generate_fingerprint_key",
    "generate_key",
    "key_id",
    "load_fingerprint_key",
    "load_private_key",
    "load_public_key",
    "public_pem",
    "verifying_key",
]


def _create_secret_file(path: Path, data: bytes, what: str) -> None:
    """Write ``data`` to a new file (mode 0600); never overwrites an existing one."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise EvidenceUnavailable(f"{path} already exists; refusing to replace a key") from None
    except OSError as exc:
        raise EvidenceUnavailable(f"cannot create the {what} {path}: {exc}") from None
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def generate_key(path: Path) -> Ed25519PrivateKey:
    """Create a new signing key at ``path`` (mode 0600); never overwrites an existing file."""
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    _create_secret_file(path, pem, "signing key")
    return key


def generate_fingerprint_key(path: Path) -> FingerprintKey:
    """Create a new redaction fingerprint key at ``path`` (mode 0600); never overwrites one."""
    key = FingerprintKey(os.urandom(32))
    _create_secret_file(path, key.secret.hex().encode("ascii") + b"\n", "fingerprint key")
    return key


def load_fingerprint_key(path: Path) -> FingerprintKey:
    """The redaction fingerprint key in ``path``: hex digits, at least 16 bytes' worth."""
    try:
        text = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise EvidenceUnavailable(f"cannot read the fingerprint key {path}: {exc}") from None
    try:
        return FingerprintKey(bytes.fromhex(text))
    except ValueError as exc:
        raise EvidenceUnavailable(
            f"{path} is not a fingerprint key (at least 32 hex digits): {exc}"
        ) from None


def load_private_key(path: Path) -> Ed25519PrivateKey:
    """The Ed25519 signing key in the PEM file ``path``."""
    key = _load(path, private=True)
    assert isinstance(key, Ed25519PrivateKey)
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    """The Ed25519 public key in ``path``; a private key file gives its public half."""
    key = _load(path, private=False)
    if isinstance(key, Ed25519PrivateKey):
        return key.public_key()
    assert isinstance(key, Ed25519PublicKey)
    return key


def _load(path: Path, *, private: bool) -> Ed25519PrivateKey | Ed25519PublicKey:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EvidenceUnavailable(f"cannot read key file {path}: {exc}") from None
    key: object
    try:
        if private or b"PRIVATE KEY" in data:
            key = serialization.load_pem_private_key(data, password=None)
        else:
            key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError, UnsupportedAlgorithm) as exc:
        raise EvidenceUnavailable(f"{path} is not a readable PEM key: {exc}") from None
    if not isinstance(key, Ed25519PrivateKey | Ed25519PublicKey):
        raise EvidenceUnavailable(f"{path} holds a {type(key).__name__}, not an Ed25519 key")
    if private and not isinstance(key, Ed25519PrivateKey):
        raise EvidenceUnavailable(f"{path} holds a public key; signing needs the private key")
    return key


def public_pem(key: Ed25519PublicKey) -> bytes:
    """``key`` as a SubjectPublicKeyInfo PEM file's bytes."""
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def key_id(key: Ed25519PublicKey) -> str:
    """Fingerprint of ``key``: the first 16 hex digits of SHA-256 over its 32 raw bytes."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()[:16]


def verifying_key(public: Path | None, private: Path | None) -> Ed25519PublicKey | None:
    """The key checkpoints are checked with: ``public`` if given, else ``private``'s public half."""
    if public is not None:
        return load_public_key(public)
    if private is not None:
        return load_public_key(private)
    return None
