"""Signed decisions: who approved, rejected or resolved a call, provable without the database.

A decision is a :class:`Statement` (saga, seq, input hash, decision, reason, result, principal)
signed with Ed25519 over :func:`message`, by the principal's own key or by the approvals
service's key on behalf of a principal it authenticated. A :class:`Keyring` lists the public keys
a deployment trusts and the principals each may sign for; the worker checks every decision
against it before the decision changes anything, and ``sagacity verify`` checks the decision rows
of the journal against it offline. ``docs/decisions.md`` gives the exact bytes.

A :class:`Policy` says who may decide which tool and who may resolve SUSPECT calls; the worker
enforces it for every route (signal, update, CLI, HTTP).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.keys import key_id, load_private_key
from sagacity.journal.canonical import to_json
from sagacity.journal.chain import format_timestamp
from sagacity.journal.entry import Entry
from sagacity.journal.phases import APPROVAL_GATE

__all__ = [
    "ANY_PRINCIPAL",
    "DOMAIN",
    "DecisionCheck",
    "DecisionKind",
    "Keyring",
    "KeyringKey",
    "Policy",
    "Signature",
    "Signer",
    "Statement",
    "allowed",
    "keyring_entry",
    "load_keyring",
    "message",
    "row_statement",
    "signed_row",
    "signer_refusal",
    "write_keyring",
]

#: The domain tag that starts every signed decision message (a checkpoint's differs)
DOMAIN = b"sagacity-decision-v1\n"
#: In a keyring entry's ``principals``: a service key that may sign for anyone it authenticated
ANY_PRINCIPAL = "*"

#: ``approve``/``reject`` an approval request; ``happened``/``not_happened`` resolve a SUSPECT call;
#: ``halt``/``resume`` and ``halt_report`` are an operator's halt, its lifting and its blast radius;
#: ``abort`` stops one saga (``seq`` 0, no input hash: it names the saga and the reason only)
DecisionKind = Literal[
    "approve", "reject", "happened", "not_happened", "halt", "resume", "halt_report", "abort"
]

_TIMESTAMP = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{6}Z$"


class Signature(BaseModel):
    """A signature over a decision's :func:`message`, as it travels with the decision."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    key_id: str = Field(pattern=r"^[0-9a-f]{16}$", description="fingerprint of the signing key")
    signed_at: str = Field(pattern=_TIMESTAMP, description="when it was signed, UTC, hashed form")
    signature: str = Field(max_length=100, description="the Ed25519 signature, base64")


@dataclass(frozen=True, slots=True)
class Statement:
    """What a signature vouches for. ``seq`` is the request's AWAITING_APPROVAL seq (approvals)
    or the SUSPECT call's INTENT seq (resolutions); ``input_hash`` is the request's input hash
    (approvals) or the INTENT row's chain hash (resolutions); ``result`` is the canonical JSON of
    what a call that happened returned, else empty."""

    saga_id: str
    seq: int
    input_hash: str
    decision: DecisionKind
    principal: str
    reason: str = ""
    result: str = ""


def _netstring(value: str) -> bytes:
    raw = value.encode("utf-8")
    return str(len(raw)).encode("ascii") + b":" + raw + b","


def message(statement: Statement, *, signed_at: str, key: str) -> bytes:
    """The exact bytes a decision's signature covers: :data:`DOMAIN` then nine netstrings."""
    fields = (
        statement.saga_id,
        str(statement.seq),
        statement.input_hash,
        statement.decision,
        statement.reason,
        statement.result,
        signed_at,
        key,
        statement.principal,
    )
    return DOMAIN + b"".join(_netstring(f) for f in fields)


def allowed(rules: Mapping[str, Sequence[str]] | None, who: str, tool: str) -> bool:
    """Whether ``rules`` (tool or ``"*"`` to identities; None: anyone) let ``who`` act on ``tool``."""
    named = permitted(rules, tool)
    return named is None or who in named


def permitted(rules: Mapping[str, Sequence[str]] | None, tool: str) -> list[str] | None:
    """Who ``rules`` let act on ``tool``, sorted (None: anyone; empty: no one)."""
    if rules is None:
        return None
    return sorted({*rules.get(tool, ()), *rules.get("*", ())})


class Policy(BaseModel):
    """Who may decide which tool's calls, and who may resolve which tool's SUSPECT calls.

    Each maps a tool name (or ``"*"``, every tool) to identities; None lets anyone.
    """

    approvers: dict[str, list[str]] | None = None
    resolvers: dict[str, list[str]] | None = None


class KeyringKey(BaseModel):
    """One trusted public key: whose it is, and which principals it may sign decisions for."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    #: the raw 32-byte Ed25519 public key, base64
    public_key: str
    #: identities this key signs for; ``"*"``: any (a service signing for whoever it authenticated)
    principals: list[str] = Field(min_length=1)

    @property
    def key(self) -> Ed25519PublicKey:
        return Ed25519PublicKey.from_public_bytes(base64.b64decode(self.public_key, validate=True))

    @property
    def key_id(self) -> str:
        return key_id(self.key)


class Keyring(BaseModel):
    """The public keys decisions may be signed with (``SAGACITY_KEYRING``, a JSON file)."""

    model_config = ConfigDict(extra="forbid")

    keys: list[KeyringKey] = Field(default_factory=list)

    def find(self, fingerprint: str) -> KeyringKey | None:
        return next((k for k in self.keys if k.key_id == fingerprint), None)

    def refusal(self, statement: Statement, signature: Signature | None) -> str | None:
        """Why ``signature`` does not prove ``statement``, or None when it does."""
        if signature is None:
            return "unsigned: a keyring is configured, so a decision must carry a signature"
        entry = self.find(signature.key_id)
        if entry is None:
            return f"signed with key {signature.key_id}, which is not in the keyring"
        if not ({ANY_PRINCIPAL, statement.principal} & set(entry.principals)):
            return f"key {signature.key_id} ({entry.name}) may not sign for {statement.principal!r}"
        try:
            raw = base64.b64decode(signature.signature, validate=True)
            entry.key.verify(
                raw, message(statement, signed_at=signature.signed_at, key=entry.key_id)
            )
        except (InvalidSignature, binascii.Error, ValueError):
            return (
                f"the signature by key {signature.key_id} ({entry.name}) does not verify: it was "
                "made for another decision, saga, seq, input hash, reason or time"
            )
        return None


def load_keyring(path: Path) -> Keyring:
    """The keyring in the JSON file ``path``; :class:`EvidenceUnavailable` saying why not."""
    try:
        keyring = Keyring.model_validate_json(path.read_bytes())
        for entry in keyring.keys:
            entry.key  # noqa: B018 -- a key that does not decode is refused here, not at use
    except OSError as exc:
        raise EvidenceUnavailable(f"cannot read the keyring {path}: {exc}") from None
    except (ValidationError, binascii.Error, ValueError) as exc:
        raise EvidenceUnavailable(f"{path} is not a valid keyring: {exc}") from None
    return keyring


def write_keyring(path: Path, keyring: Keyring) -> None:
    """Write ``keyring`` as the JSON file ``path`` (what :func:`load_keyring` reads)."""
    path.write_text(keyring.model_dump_json(indent=2) + "\n", encoding="utf-8")


def keyring_entry(name: str, key: Ed25519PublicKey, principals: Sequence[str]) -> KeyringKey:
    """A keyring entry for ``key``."""
    raw = key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return KeyringKey(
        name=name, public_key=base64.b64encode(raw).decode("ascii"), principals=list(principals)
    )


@dataclass(frozen=True)
class Signer:
    """A private key that signs decisions: an approver's own, or the approvals service's."""

    key: Ed25519PrivateKey

    @classmethod
    def open(cls, path: Path) -> Signer:
        return cls(load_private_key(path))

    @property
    def key_id(self) -> str:
        return key_id(self.key.public_key())

    def sign(self, statement: Statement, *, at: datetime | None = None) -> Signature:
        signed_at = format_timestamp(at or datetime.now(UTC))
        raw = self.key.sign(message(statement, signed_at=signed_at, key=self.key_id))
        return Signature(
            key_id=self.key_id,
            signed_at=signed_at,
            signature=base64.b64encode(raw).decode("ascii"),
        )


def signer_refusal(signer: Signer | None, keyring: Keyring | None, principal: str) -> str | None:
    """Why ``keyring`` would refuse a decision ``signer`` signs as ``principal`` (no signer, an
    unknown key, a key not trusted for that principal), or None. No keyring: nothing to refuse."""
    if keyring is None:
        return None
    if signer is None:
        return (
            "decisions must be signed (a keyring is configured): set SAGACITY_APPROVER_KEY "
            "(the CLI) or SAGACITY_SERVICE_KEY (the HTTP API)"
        )
    entry = keyring.find(signer.key_id)
    if entry is None:
        return f"the signing key {signer.key_id} is not in the keyring"
    if not ({ANY_PRINCIPAL, principal} & set(entry.principals)):
        return f"the signing key {signer.key_id} ({entry.name}) may not sign for {principal!r}"
    return None


def signed_row(statement: Statement, signature: Signature, signer: str) -> str:
    """The payload of a signed APPROVED or REJECTED row: the statement and its signature."""
    return to_json(
        {
            "by": statement.principal,
            "decision": statement.decision,
            "input_hash": statement.input_hash,
            "reason": statement.reason,
            "signer": signer,
            **signature.model_dump(),
        }
    )


def row_statement(
    saga_id: str, seq: int, phase: str, payload: str
) -> tuple[Statement, Signature, str] | None:
    """The signed decision an approval-gate row at ``seq`` records (statement, signature, signer),
    or None when its payload holds no signature. ``ValueError`` when it holds a damaged one."""
    try:
        body: Any = json.loads(payload)
    except ValueError:
        return None  # `approver=<name>`: an unsigned decision
    if not isinstance(body, dict) or "signature" not in body:
        return None
    want: DecisionKind = "approve" if phase == "APPROVED" else "reject"
    if body.get("decision") != want:
        raise ValueError(f"a {phase} row records decision {body.get('decision')!r}")
    fields = ("by", "input_hash", "reason", "signer")
    if not all(isinstance(body.get(f), str) for f in fields):
        raise ValueError(f"a signed decision row needs {', '.join(fields)} as text")
    try:
        signature = Signature.model_validate(
            {k: body.get(k) for k in ("key_id", "signed_at", "signature")}
        )
    except ValidationError as exc:
        raise ValueError(f"the signature is damaged: {exc.errors()[0]['msg']}") from None
    statement = Statement(
        saga_id=saga_id,
        seq=seq - 1,  # the decision row follows its request
        input_hash=body["input_hash"],
        decision=want,
        principal=body["by"],
        reason=body["reason"],
    )
    return statement, signature, body["signer"]


class DecisionCheck:
    """Checks a saga's decision rows against a keyring, fed its rows in order.

    Every APPROVED row of the approval gate must carry a signature that verifies with a key of
    the keyring allowed to sign for the approver it names; a REJECTED row is checked when it
    carries one (the saga itself rejects on a deadline or an abort, unsigned). ``problems`` are
    (seq, why) pairs; ``checked`` counts the signatures that verified.
    """

    def __init__(self, saga_id: str, keyring: Keyring) -> None:
        self.saga_id = saga_id
        self.keyring = keyring
        self.problems: list[tuple[int, str]] = []
        self.checked = 0

    def feed(self, entry: Entry) -> None:
        if entry.tool_name != APPROVAL_GATE or str(entry.phase) not in ("APPROVED", "REJECTED"):
            return
        phase = str(entry.phase)
        try:
            found = row_statement(self.saga_id, entry.seq, phase, entry.payload)
        except ValueError as exc:
            self.problems.append((entry.seq, f"{phase} row's signed decision is damaged: {exc}"))
            return
        if found is None:
            if phase == "APPROVED":
                self.problems.append(
                    (entry.seq, "APPROVED row carries no signature: nothing proves who approved")
                )
            return
        statement, signature, signer = found
        why = self.keyring.refusal(statement, signature)
        named = self.keyring.find(signature.key_id)
        if why is None and named is not None and named.name != signer:
            why = f"the row names signer {signer!r}, but key {signature.key_id} is {named.name!r}"
        if why is not None:
            self.problems.append((entry.seq, f"{phase} by {statement.principal!r}: {why}"))
            return
        self.checked += 1
