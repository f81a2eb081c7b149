"""The dev stack's key material, created once and kept: anchors, trust file, keys, codec keys.

Each ``ensure_dev_*`` creates its files on first use under the data folder (owner-only, under a
lock, never replacing one) and returns them after: the checkpoint signing key and folder
(``anchors/``), the trust file pinning that key apart from them (``trust/``), the redaction
fingerprint key, the decision keys and keyring (``approvers/``) and the payload codec's key file.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import secrets
import tempfile
import time
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import DevStackError, EvidenceUnavailable
from sagacity.evidence.decisions import ANY_PRINCIPAL, Keyring, keyring_entry, write_keyring
from sagacity.evidence.keys import (
    generate_fingerprint_key,
    generate_key,
    key_id,
    load_private_key,
    public_pem,
)
from sagacity.evidence.trust import (
    TrustedKey,
    TrustedWitness,
    TrustRoots,
    load_trust,
    write_trust,
)
from sagacity.settings import (
    DevAnchors,
    DevApprovers,
    dev_anchors,
    dev_approvers,
    dev_codec_keys,
    dev_trust_file,
)
from sagacity.temporal.codec import new_codec_key

__all__ = [
    "DEV_SIGNER_NAME",
    "SERVICE_KEY_NAME",
    "ensure_dev_anchors",
    "ensure_dev_approvers",
    "ensure_dev_codec_keys",
    "ensure_dev_fingerprint_key",
    "ensure_dev_trust",
]

#: The name the dev keyring gives the approvals service's key
SERVICE_KEY_NAME = "approvals-service"
#: The name the dev trust file gives the checkpoint signing key
DEV_SIGNER_NAME = "sagacity-dev"


def ensure_dev_anchors(data_dir: Path) -> tuple[DevAnchors, str, bool]:
    """The dev stack's signing key and checkpoint folder, created on first use and kept.

    Returns the paths, the key's fingerprint, and whether this call created the key. A lock
    file keeps two processes starting at once from both creating one.
    """
    anchors = dev_anchors(data_dir)
    try:
        anchors.checkpoint_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (anchors.folder / ".lock").open("ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            created = not anchors.signing_key.exists()
            key = generate_key(anchors.signing_key) if created else None
            key = key or load_private_key(anchors.signing_key)
            if not anchors.public_key.exists():
                anchors.public_key.write_bytes(public_pem(key.public_key()))
    except (OSError, EvidenceUnavailable) as exc:
        raise DevStackError(f"cannot create the dev anchors in {anchors.folder}: {exc}") from exc
    return anchors, key_id(key.public_key()), created


def ensure_dev_trust(
    data_dir: Path, signer: Ed25519PublicKey, witness: TrustedWitness | None = None
) -> tuple[Path, str | None]:
    """The dev stack's trust file, pinning ``signer`` when this call creates it, kept after.

    It lives in ``<data_dir>/trust/`` (mode 0700, the file read-only), apart from the anchors
    folder the workers write. ``witness`` (the dev witness) is pinned with a quorum of one; a
    trust file made before it had one gains it, and its address follows the witness's port (the
    keys pinned never change). Returns its path and, when it does not pin ``signer``, why (the
    key was replaced since: verification fails until the change is rotated or the file removed).
    """
    path = dev_trust_file(data_dir)
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (path.parent / ".lock").open("ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            roots = load_trust(path) if path.exists() else None
            signers = roots.signers if roots else (TrustedKey(DEV_SIGNER_NAME, signer),)
            witnesses = roots.witnesses if roots else ()
            if witness is not None:
                others = tuple(w for w in witnesses if key_id(w.key) != key_id(witness.key))
                witnesses = (*others, witness)
            quorum = max(roots.witness_quorum if roots else 0, 1 if witness else 0)
            wanted = TrustRoots(signers, witnesses, quorum)
            if roots is None or wanted != roots:
                write_trust(path, wanted)
    except (OSError, EvidenceUnavailable) as exc:
        raise DevStackError(f"cannot set up the dev trust file {path}: {exc}") from None
    if key_id(signer) in wanted.signer_keys():
        return path, None
    return path, (
        f"the trust file {path} pins {', '.join(wanted.signer_keys())}, not the signing key "
        f"{key_id(signer)}: its checkpoints will not verify. If you replaced the key yourself, "
        "sign a rotation with the old key (`sagacity anchors rotate`) or remove the trust file"
    )


def ensure_dev_fingerprint_key(data_dir: Path) -> Path:
    """The dev stack's redaction fingerprint key, created on first use and kept."""
    anchors = dev_anchors(data_dir)
    try:
        anchors.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (anchors.folder / ".lock").open("ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not anchors.fingerprint_key.exists():
                generate_fingerprint_key(anchors.fingerprint_key)
    except (OSError, EvidenceUnavailable) as exc:
        raise DevStackError(f"cannot create the dev fingerprint key: {exc}") from exc
    return anchors.fingerprint_key


def ensure_dev_approvers(data_dir: Path, user: str | None = None) -> tuple[DevApprovers, str]:
    """The dev stack's decision keys, created on first use and kept: an approver key for the
    local user (``user``, default the login name), a key the approvals service signs with for
    whoever it authenticated, and a keyring that trusts both. Returns the paths and the user."""
    approvers = dev_approvers(data_dir)
    user = user or getpass.getuser()
    try:
        approvers.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        with (approvers.folder / ".lock").open("ab") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not approvers.keyring.exists():
                mine = generate_key(approvers.approver_key).public_key()
                service = generate_key(approvers.service_key).public_key()
                keyring = Keyring(
                    keys=[
                        keyring_entry(user, mine, [user]),
                        keyring_entry(SERVICE_KEY_NAME, service, [ANY_PRINCIPAL]),
                    ]
                )
                write_keyring(approvers.keyring, keyring)
            if not approvers.console_token.exists():
                # the local user's token for `sagacity approvals serve` and its console
                fd = os.open(approvers.console_token, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                with os.fdopen(fd, "w", encoding="utf-8") as out:
                    out.write(f"{secrets.token_urlsafe(24)}={user}\n")
    except (OSError, EvidenceUnavailable) as exc:
        raise DevStackError(
            f"cannot create the dev decision keys in {approvers.folder}: {exc}"
        ) from exc
    return approvers, user


def ensure_dev_codec_keys(data_dir: Path) -> Path:
    """The dev stack's payload codec key file, created (one random key, owner-only) on first use."""
    path = dev_codec_keys(data_dir)
    if path.is_file():
        return path
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("w", dir=data_dir, prefix=".codec-keys.") as out:
            out.write(f"{new_codec_key('dev-' + time.strftime('%Y%m%d'))}\n")
            out.flush()
            # written whole, then linked: of two processes starting at once, one key wins
            with contextlib.suppress(FileExistsError):
                os.link(out.name, path)
    except OSError as exc:
        raise DevStackError(f"cannot create the dev codec keys {path}: {exc}") from exc
    return path
