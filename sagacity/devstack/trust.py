"""The key material a prepared dev stack hands out: what the settings name, else the stack's own.

Each kind is taken from the settings when given; unset, the dev stack's own files under
``data_dir`` are used, created once and kept (:mod:`sagacity.devkeys`): the checkpoint signing
key and folder (``anchors/``), the trust file that pins that key apart from them, with the dev
witness told which logs to cosign, the redaction fingerprint key, the decision keys and the keyring
that trusts them (``approvers/``), and the payload codec's key file (``codec-keys``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from psycopg.conninfo import conninfo_to_dict

from sagacity.devkeys import (
    DevSetup,
    ensure_dev_anchors,
    ensure_dev_approvers,
    ensure_dev_codec_keys,
    ensure_dev_fingerprint_key,
    ensure_dev_trust,
)
from sagacity.devwitness import DevWitness, log_key
from sagacity.errors import DevStackError, EvidenceUnavailable
from sagacity.evidence.keys import key_id, load_private_key
from sagacity.evidence.note import NoteKey
from sagacity.evidence.trust import TrustedWitness
from sagacity.evidence.trust import fingerprint as full_fingerprint
from sagacity.settings import dev_anchors

if TYPE_CHECKING:
    from sagacity.settings import Settings

__all__ = ["dev_setup"]


@dataclass(frozen=True)
class _SigningKey:
    """The checkpoint signing key: its two halves' files, its key id, and whether it is new."""

    private: Path
    public: Path
    key_id: str
    created: bool


@dataclass(frozen=True)
class _DecisionKeys:
    """The keyring decisions are checked against and the keys that sign them."""

    keyring: Path | None
    approver_key: Path | None
    service_key: Path | None
    #: who the approver key signs for, when the dev stack made it
    approver: str | None = None
    console_token: Path | None = None


def dev_setup(
    settings: Settings,
    data_dir: Path,
    *,
    owner: str | None,
    app: str,
    witness: Callable[[], DevWitness | None],
) -> DevSetup:
    """The set-up of a stack whose journal logins are ``owner`` and ``app``: the keys the
    settings name, the dev ones under ``data_dir`` for the rest (created on first use).

    ``witness`` gives the stack's dev witness (started on first call; None when it runs none);
    it is asked for only when the dev trust file is used, which pins it.
    """
    signing = _signing_key(settings, data_dir)
    signer = load_private_key(signing.private).public_key()
    checkpoint_dir = settings.checkpoint_dir or dev_anchors(data_dir).checkpoint_dir
    trust_file, trust_problem, trusted = settings.trust_file, None, None
    if trust_file is None:
        trusted = _witnessing(witness(), app, signer, checkpoint_dir)
        trust_file, trust_problem = ensure_dev_trust(data_dir, signer, trusted)
    decisions = _decision_keys(settings, data_dir)
    codec_keys_file = settings.codec_keys_file
    if codec_keys_file is None and settings.codec_keys is None:
        codec_keys_file = ensure_dev_codec_keys(data_dir)
    return DevSetup(
        owner_database_url=owner,
        database_url=app,
        signing_key=signing.private,
        public_key=settings.checkpoint_public_key or signing.public,
        checkpoint_dir=checkpoint_dir,
        key_id=signing.key_id,
        key_created=signing.created,
        trust_file=trust_file,
        fingerprint=full_fingerprint(signer),
        trust_problem=trust_problem,
        witness=trusted,
        fingerprint_key=settings.redact_key or ensure_dev_fingerprint_key(data_dir),
        keyring=decisions.keyring,
        approver_key=decisions.approver_key,
        service_key=decisions.service_key,
        approver=decisions.approver,
        codec_keys_file=codec_keys_file,
        console_token=decisions.console_token,
    )


def _signing_key(settings: Settings, data_dir: Path) -> _SigningKey:
    """``SAGACITY_SIGNING_KEY`` (its public half beside it when there), else the dev anchors'."""
    if settings.signing_key is None:
        anchors, fingerprint, created = ensure_dev_anchors(data_dir)
        return _SigningKey(anchors.signing_key, anchors.public_key, fingerprint, created)
    signing_key = settings.signing_key
    beside = signing_key.with_name(signing_key.name + ".pub")
    try:
        fingerprint = key_id(load_private_key(signing_key).public_key())
    except EvidenceUnavailable as exc:
        raise DevStackError(str(exc)) from None
    return _SigningKey(
        signing_key, beside if beside.is_file() else signing_key, fingerprint, created=False
    )


def _witnessing(
    witness: DevWitness | None, app_url: str, signer: Ed25519PublicKey, checkpoint_dir: Path
) -> TrustedWitness | None:
    """Have ``witness`` cosign the log of the stack's database and the log already published in
    ``checkpoint_dir``; its trust file entry (None without a witness)."""
    if witness is None:
        return None
    database = str(conninfo_to_dict(app_url).get("dbname") or "")
    witness.witness_log(log_key(database, signer))
    with contextlib.suppress(OSError, ValueError, IndexError):
        origin = (checkpoint_dir / "tlog" / "checkpoint").read_text().split("\n")[0]
        if origin:
            witness.witness_log(NoteKey(origin, signer))
    return witness.trusted


def _decision_keys(settings: Settings, data_dir: Path) -> _DecisionKeys:
    """The keyring and signing keys the settings name; without a keyring, the dev ones."""
    given = _DecisionKeys(settings.keyring, settings.approver_key, settings.service_key)
    if given.keyring is not None:
        return given
    # decisions are signed by default: a keyring configured is the tested configuration
    approvers, approver = ensure_dev_approvers(data_dir)
    return _DecisionKeys(
        keyring=approvers.keyring,
        approver_key=given.approver_key or approvers.approver_key,
        service_key=given.service_key or approvers.service_key,
        approver=approver,
        console_token=approvers.console_token,
    )
