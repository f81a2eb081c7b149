"""The dev stack's key material, created once and kept, and the set-up it hands out.

Each ``ensure_dev_*`` creates its files on first use under the data folder (owner-only, under a
lock, never replacing one) and returns them after: the checkpoint signing key and folder
(``anchors/``), the trust file pinning that key apart from them (``trust/``), the redaction
fingerprint key, the decision keys and keyring (``approvers/``) and the payload codec's key file.
:class:`DevSetup` is what the dev stack's preparation hands every command: those and the logins.
"""

from __future__ import annotations

import contextlib
import fcntl
import getpass
import os
import secrets
import tempfile
import time
from dataclasses import dataclass
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
    "DevSetup",
    "ensure_dev_anchors",
    "ensure_dev_approvers",
    "ensure_dev_codec_keys",
    "ensure_dev_fingerprint_key",
    "ensure_dev_trust",
]


@dataclass(frozen=True)
class DevSetup:
    """What :meth:`DevStack.prepare` set up: the journal's two logins and the anchors."""

    #: the tables' owner (migrations, grants); None when the stack was given only an app login
    owner_database_url: str | None
    #: the append-only ``sagacity_app`` login every worker and command uses
    database_url: str
    signing_key: Path
    public_key: Path
    checkpoint_dir: Path
    key_id: str
    #: True when this call created the signing key (its fingerprint is worth printing once)
    key_created: bool
    #: the key redaction fingerprints are keyed with
    fingerprint_key: Path
    #: the trust file verifiers pin the signing key with, apart from the workers' folders
    trust_file: Path | None = None
    #: the signing key's full fingerprint (SHA-256 of its raw bytes), to publish
    fingerprint: str = ""
    #: why the trust file does not pin the signing key, when it does not
    trust_problem: str | None = None
    #: the dev witness every tree head is cosigned by, pinned in the trust file
    witness: TrustedWitness | None = None
    #: the keyring decisions must be signed against, and the keys that sign them
    keyring: Path | None = None
    approver_key: Path | None = None
    service_key: Path | None = None
    #: who the approver key signs for (the local user) when the dev stack made it
    approver: str | None = None
    #: the payload codec's key file; None when the keys were given inline (SAGACITY_CODEC_KEYS)
    codec_keys_file: Path | None = None
    #: ``token=user``: the local user's token for the approvals API and its console
    console_token: Path | None = None

    def settings(self) -> dict[str, object]:
        """The settings that point a command at this set-up."""
        decisions = {
            name: path
            for name, path in (
                ("keyring", self.keyring),
                ("approver_key", self.approver_key),
                ("service_key", self.service_key),
            )
            if path is not None
        }
        return {
            **({"codec_keys_file": self.codec_keys_file} if self.codec_keys_file else {}),
            **({"approval_tokens_file": self.console_token} if self.console_token else {}),
            "database_url": self.database_url,
            **({"owner_database_url": self.owner_database_url} if self.owner_database_url else {}),
            "signing_key": self.signing_key,
            **({"trust_file": self.trust_file} if self.trust_file else {}),
            "checkpoint_dir": self.checkpoint_dir,
            "redact_key": self.fingerprint_key,
            **decisions,
        }


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
