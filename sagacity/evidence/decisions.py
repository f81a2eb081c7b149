"""Signed decisions: who approved, rejected, aborted, halted or resolved, provable offline.

A decision is a :class:`Statement` (saga, seq, input hash, decision, reason, result, principal)
signed with Ed25519 over :func:`message`, by the principal's own key or by the approvals
service's key on behalf of a principal it authenticated. A :class:`Keyring` lists the public keys
a deployment trusts and the principals each may sign for; the worker checks every decision
against it before the decision changes anything, and journals it with its whole signature
(:func:`signed_row`). ``sagacity verify`` checks the journal's decision rows offline with
:class:`DecisionCheck`: each signature, and that each decision is bound to its request and to
the call that ran. ``docs/decisions.md`` gives the exact bytes and rules.

A :class:`Policy` says who may decide which tool and who may resolve SUSPECT calls; the worker
enforces it for every route (signal, update, CLI, HTTP).
"""

from __future__ import annotations

import base64
import binascii
import re
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
from sagacity.evidence.quorum_check import quorum_problems
from sagacity.evidence.redaction import hidden_paths
from sagacity.journal import parse_json
from sagacity.journal.canonical import input_hash, to_json
from sagacity.journal.chain import format_timestamp
from sagacity.journal.entry import Entry
from sagacity.journal.phases import APPROVAL_GATE
from sagacity.journal.results import RESOLUTION
from sagacity.rules import ApprovalRule, judge, requested_by

__all__ = [
    "ANY_PRINCIPAL",
    "DOMAIN",
    "HALT_SUBJECT",
    "DecisionCheck",
    "DecisionKind",
    "Keyring",
    "KeyringKey",
    "Policy",
    "Signature",
    "Signer",
    "Statement",
    "allowed",
    "halt_statement",
    "keyring_entry",
    "load_keyring",
    "message",
    "payload_object",
    "row_statement",
    "signed_row",
    "signer_refusal",
    "write_keyring",
]

#: The domain tag that starts every signed decision message (a checkpoint's differs)
DOMAIN = b"sagacity-decision-v1\n"
#: The ``saga_id`` a halt's signed statements name: they speak of many sagas, or of none yet
HALT_SUBJECT = "sagacity:halt"
#: In a keyring entry's ``principals``: a service key that may sign for anyone it authenticated
ANY_PRINCIPAL = "*"

#: ``approve``/``reject`` an approval request, ``approve_edited`` approve it with changed arguments
#: (``result``: the SHA-256 of their canonical JSON); ``happened``/``not_happened`` resolve a SUSPECT call;
#: ``halt``/``resume`` and ``halt_report`` are an operator's halt, its lifting and its blast radius;
#: ``abort`` stops one saga (``seq`` 0, no input hash: it names the saga and the reason only)
DecisionKind = Literal[
    "approve",
    "approve_edited",
    "reject",
    "happened",
    "not_happened",
    "halt",
    "resume",
    "halt_report",
    "abort",
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
    what a call that happened returned, a rejection's message for the model, else empty."""

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
    #: named groups of principals an ``ApprovalPolicy`` draws its approvers from (left off
    #: the file and the wire when there are none, so keyrings without them read as before)
    groups: dict[str, list[str]] = Field(default_factory=dict, exclude_if=lambda g: not g)

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
                "made for another decision, saga, seq, input hash, reason, message or time"
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


def signed_row(statement: Statement, signature: Signature, signer: str, **extra: Any) -> str:
    """The payload of a journal row that records a signed decision: the statement's fields the
    row's place does not give, the signature, the signer's name in the keyring, and ``extra``
    (an abort's ``"abort": true``, a halt's record, a resolution's result). A rejection's
    message (its statement's ``result``) is ``"message"``, absent when there is none."""
    if statement.decision == "reject" and statement.result:
        extra = {**extra, "message": statement.result}
    return to_json(
        {
            **extra,
            "by": statement.principal,
            "decision": statement.decision,
            "input_hash": statement.input_hash,
            "reason": statement.reason,
            "signer": signer,
            **signature.model_dump(),
        }
    )


def halt_statement(
    *,
    kind: str,
    policy: str,
    scope: Mapping[str, Any],
    operator: str,
    reason: str,
    decision: DecisionKind = "halt",
    seq: int = 0,
) -> Statement:
    """What an operator signs to halt (``seq`` 0: a halt is signed before it has an id) or to
    lift halt ``seq`` (``resume``): the halt's kind, policy and scope, by the SHA-256 of their
    canonical JSON, and why."""
    record = to_json({"kind": kind, "policy": policy, "scope": dict(scope)})
    return Statement(
        saga_id=HALT_SUBJECT,
        seq=seq,
        input_hash=input_hash(record),
        decision=decision,
        principal=operator,
        reason=reason,
    )


def payload_object(payload: str) -> dict[str, Any] | None:
    """A row's payload as a JSON object, or None when it is not one (``approver=<name>``)."""
    try:
        body = parse_json(payload)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _kinds(gate: bool, phase: str) -> tuple[str, ...]:
    """The decisions a row of the approval gate (``gate``) or of a tool may record."""
    if gate:
        return {
            "APPROVED": ("approve", "approve_edited"),
            "REJECTED": ("reject", "abort", "halt"),
        }.get(phase, ())
    return {"EXECUTED": ("happened",), "FAILED": ("not_happened",)}.get(phase, ())


def _halt_of(body: dict[str, Any]) -> dict[str, Any]:
    halt = body.get("halt")
    if not (
        isinstance(halt, dict)
        and isinstance(halt.get("id"), int)
        and isinstance(halt.get("kind"), str)
        and isinstance(halt.get("policy"), str)
        and isinstance(halt.get("scope"), dict)
    ):
        raise ValueError("a halt's row needs halt: {id, kind, policy, scope}")
    return halt


def row_statement(
    saga_id: str, seq: int, phase: str, payload: str, *, tool_name: str = APPROVAL_GATE
) -> tuple[Statement, Signature, str] | None:
    """The signed decision the row at ``seq`` records (statement, signature, signer), or None
    when its payload holds no signature. ``ValueError`` when it holds a damaged one.

    The row's place gives what its payload does not repeat: ``approve``/``reject`` are about the
    request at ``seq - 1``, a resolution about the INTENT at ``seq - 1``; an ``abort`` names the
    saga only (seq 0); a ``halt`` is the operator's statement about the halt the row records.
    """
    body = payload_object(payload)
    if body is None or "signature" not in body:
        return None
    decision = body.get("decision")
    kinds = _kinds(tool_name == APPROVAL_GATE, phase)
    if decision not in kinds:
        raise ValueError(f"a {phase} row of {tool_name!r} records decision {decision!r}")
    fields = ("by", "input_hash", "reason", "signer")
    if not all(isinstance(body.get(f), str) for f in fields):
        raise ValueError(f"a signed decision row needs {', '.join(fields)} as text")
    try:
        signature = Signature.model_validate(
            {k: body.get(k) for k in ("key_id", "signed_at", "signature")}
        )
    except ValidationError as exc:
        raise ValueError(f"the signature is damaged: {exc.errors()[0]['msg']}") from None
    by, reason, signed = body["by"], body["reason"], body["input_hash"]
    if decision == "halt":
        halt = _halt_of(body)
        statement = halt_statement(
            kind=halt["kind"],
            policy=halt["policy"],
            scope=halt["scope"],
            operator=by,
            reason=reason,
        )
        if statement.input_hash != signed:
            raise ValueError("its input_hash is not the SHA-256 of the halt it records")
    elif decision == "abort":
        statement = Statement(saga_id, 0, signed, "abort", by, reason)
    elif decision == "happened":
        if "result" not in body:
            raise ValueError("a signed resolution that says the call happened needs its result")
        statement = Statement(
            saga_id, seq - 1, signed, "happened", by, result=to_json(body["result"])
        )
    elif decision == "reject":
        # about the request before; its message for the model, if any, is the signed result
        note = body.get("message", "")
        if not isinstance(note, str) or ("message" in body and not note):
            raise ValueError("a signed rejection's message must be non-empty text")
        statement = Statement(saga_id, seq - 1, signed, "reject", by, reason, note)
    elif decision == "approve_edited":
        edited = body.get("approved_input_hash")
        if not (isinstance(edited, str) and re.fullmatch(r"[0-9a-f]{64}", edited)):
            raise ValueError("an edited approval needs approved_input_hash, a SHA-256 in hex")
        statement = Statement(saga_id, seq - 1, signed, decision, by, reason, result=edited)
    else:
        # approve, not_happened: about the row before (the request, the INTENT)
        statement = Statement(saga_id, seq - 1, signed, decision, by, reason)
    return statement, signature, body["signer"]


class DecisionCheck:
    """Checks what a saga's decision rows bind, fed its rows in order (``docs/decisions.md``).

    Each signature on an approval, rejection, abort, halt or resolution row must verify with a
    key of the keyring allowed to sign for the principal the row names. Each decision is bound to
    what it decided: an APPROVED or REJECTED row follows its AWAITING_APPROVAL request, repeats
    its input, and (signed) names that input's SHA-256; the INTENT after an APPROVED runs that
    same input of that same tool; a tool that waits for approval in the saga has no INTENT
    without an APPROVED before it; a resolution names the hash of the INTENT it resolves.

    ``problems`` (seq, why) fail the saga; ``unverified`` (seq, why) are decisions nothing proves
    (an unsigned abort or halt, which the saga takes all the same: it only makes the saga
    safer); ``checked`` counts the signatures that verified. Read them after :meth:`finish`.
    """

    def __init__(self, saga_id: str, keyring: Keyring) -> None:
        self.saga_id = saga_id
        self.keyring = keyring
        self.problems: list[tuple[int, str]] = []
        self.unverified: list[tuple[int, str]] = []
        self.checked = 0
        self._prev: Entry | None = None
        #: the newest approval request, and the decision row of each request decided
        self._request: Entry | None = None
        self._decided: dict[int, int] = {}
        #: an APPROVED row (its request, its seq, the input it approved) whose call's INTENT is
        #: the next row
        self._approved: tuple[Entry, int, str] | None = None
        #: tools that wait for approval in this saga; INTENTs with no approval before them, the
        #: first of each tool (a tool is known to wait only once its first request is read)
        self._gated: set[str] = set()
        self._unapproved: dict[str, int] = {}
        #: the rule the newest request of each rule-gated tool names (``docs/decisions.md``)
        self._rules: dict[str, ApprovalRule] = {}
        self._finished = False

    def feed(self, entry: Entry) -> None:
        approved, self._approved = self._approved, None
        phase = str(entry.phase)
        if phase == "AWAITING_APPROVAL":
            self._request = entry
            rule = requested_by(payload_object(entry.payload))
            if rule is None or rule.always:
                self._gated.add(entry.tool_name)
            else:
                # a rule's request binds its own call; the tool's later calls its rule
                # matches must each have theirs (a rule judged on redacted input may not tell)
                self._rules[entry.tool_name] = rule
        elif entry.tool_name == APPROVAL_GATE and phase in ("APPROVED", "REJECTED"):
            self._decision(entry, phase, approved)
        elif phase == "INTENT":
            self._intent(entry, approved)
        elif (
            phase in ("EXECUTED", "FAILED")
            and self._prev is not None
            and str(self._prev.phase) == "INTENT"
            and self._prev.seq == entry.seq - 1
        ):
            self._resolution(entry, self._prev)
        self._prev = entry

    def finish(self) -> None:
        """Name the INTENTs of tools found to wait for approval only after them."""
        if self._finished:
            return
        self._finished = True
        for tool, seq in sorted(self._unapproved.items(), key=lambda item: item[1]):
            if tool in self._gated:
                self.problems.append((seq, _ungated(seq, tool)))
        self.problems.sort(key=lambda problem: problem[0])

    # -- approval gate -------------------------------------------------------------------------

    def _decision(self, entry: Entry, phase: str, approved: tuple[Entry, int, str] | None) -> None:
        seq = entry.seq
        body = payload_object(entry.payload)
        abort = body is not None and body.get("abort") is True
        request = self._request
        if request is None:
            self.problems.append(
                (
                    seq,
                    f"{phase} row at seq {seq} decides no request: no "
                    "AWAITING_APPROVAL row comes before it",
                )
            )
            return
        after_approval = approved is not None and approved[0] is request
        if request.seq in self._decided and not (abort and after_approval):
            self.problems.append(
                (
                    seq,
                    f"{phase} row at seq {seq} is a second decision for the request at seq "
                    f"{request.seq}, decided at seq {self._decided[request.seq]}",
                )
            )
            return
        if not abort and request.seq != seq - 1:
            self.problems.append(
                (
                    seq,
                    f"{phase} row at seq {seq} decides no request: the newest request is at "
                    f"seq {request.seq}, and a decision follows its request at once",
                )
            )
            return
        self._decided.setdefault(request.seq, seq)
        edited = phase == "APPROVED" and _edited(body)
        if edited:
            self._edited_input(entry, body or {})
        elif entry.input != request.input:
            self.problems.append(
                (
                    seq,
                    f"decision seq {seq} disagrees: it repeats input sha256 "
                    f"{input_hash(entry.input)} but the request at seq {request.seq} holds "
                    f"{input_hash(request.input)}",
                )
            )
        self._signature(entry, phase, request)
        found, verified = quorum_problems(
            seq,
            phase,
            payload_object(request.payload),
            body,
            self.keyring.groups,
            lambda item: self._co_signature(item, request),
            lambda key: ANY_PRINCIPAL not in getattr(self.keyring.find(key), "principals", ()),
        )
        self.problems.extend((seq, why) for why in found)
        self.checked += verified
        if phase == "APPROVED":
            # the call it approved is checked whatever its signature said (reported already):
            # an edited approval's call runs the input the row approved, any other the request's
            self._approved = (request, seq, entry.input if edited else request.input)

    def _co_signature(self, item: dict[str, Any], request: Entry) -> str | None:
        """Why a listed co-approval does not prove itself (None: its signature verifies, by a
        key allowed to sign for its principal, over the request's input)."""
        try:
            found = row_statement(self.saga_id, request.seq + 1, "APPROVED", to_json(item))
        except ValueError as exc:
            return f"damaged: {exc}"
        if found is None or found[0].decision != "approve":
            return "it carries no signature of an approval"
        statement, signature, signer = found
        if statement.input_hash != input_hash(request.input):
            return f"signed over input sha256 {statement.input_hash}, not the request's"
        named = self.keyring.find(signature.key_id)
        if named is not None and named.name != signer:
            return f"it names signer {signer!r}, but key {signature.key_id} is {named.name!r}"
        return self.keyring.refusal(statement, signature)

    def _edited_input(self, entry: Entry, body: dict[str, Any]) -> None:
        """An edited approval's row must hold the input its signature names: the SHA-256 of
        its canonical JSON. Held redacted, the row cannot show it (a warning, not a failure)."""
        seq, signed = entry.seq, body.get("approved_input_hash")
        if hidden_paths(entry.input):
            self.unverified.append(
                (
                    seq,
                    f"the edited approval at seq {seq} is signed over an input the journal holds "
                    "redacted: its hash cannot be checked from the journal",
                )
            )
        elif input_hash(entry.input) != signed:
            self.problems.append(
                (
                    seq,
                    f"edited approval seq {seq} disagrees: it holds input sha256 "
                    f"{input_hash(entry.input)} but its approver signed {signed}",
                )
            )

    def _signature(self, entry: Entry, phase: str, request: Entry | None) -> None:
        """Check the row's signature, if any, and the input hash it names."""
        seq = entry.seq
        try:
            found = row_statement(
                self.saga_id, seq, phase, entry.payload, tool_name=entry.tool_name
            )
        except ValueError as exc:
            self.problems.append((seq, f"{phase} row's signed decision is damaged: {exc}"))
            return
        if found is None:
            self._unsigned(entry, phase)
            return
        statement, signature, signer = found
        kind = statement.decision
        if request is not None and kind in _GATE_KINDS:
            held = input_hash(request.input)
            if statement.input_hash != held:
                self.problems.append(
                    (
                        seq,
                        f"decision seq {seq} disagrees: signed over input sha256 "
                        f"{statement.input_hash} but the request at seq {request.seq} holds "
                        f"{held}",
                    )
                )
                return
        if kind == "halt" and not _halt_covers(payload_object(entry.payload), self.saga_id):
            self.problems.append(
                (seq, f"halt row at seq {seq} records a halt whose scope leaves out this saga")
            )
            return
        why = self.keyring.refusal(statement, signature)
        named = self.keyring.find(signature.key_id)
        if why is None and named is not None and named.name != signer:
            why = f"the row names signer {signer!r}, but key {signature.key_id} is {named.name!r}"
        if why is not None:
            what = phase if kind in _GATE_KINDS else f"{phase} {kind}"
            self.problems.append((seq, f"{what} by {statement.principal!r}: {why}"))
            return
        self.checked += 1

    def _unsigned(self, entry: Entry, phase: str) -> None:
        """An unsigned decision row: an approval fails, an abort or halt is unverified, a
        rejection the saga wrote itself (a deadline) is its own."""
        seq = entry.seq
        body = payload_object(entry.payload)
        if phase == "APPROVED":
            self.problems.append(
                (seq, "APPROVED row carries no signature: nothing proves who approved")
            )
        if body is not None and body.get("abort") is True:
            what = "halt" if "halt" in body else "abort"
            self.unverified.append(
                (
                    seq,
                    f"the {what} at seq {seq} is unsigned: nothing proves it came from "
                    f"{body.get('by')!r}",
                )
            )

    # -- calls ---------------------------------------------------------------------------------

    def _intent(self, entry: Entry, approved: tuple[Entry, int, str] | None) -> None:
        seq, tool = entry.seq, entry.tool_name
        if approved is None:
            rule = self._rules.get(tool)
            matched = rule is not None and self._matches(rule, entry)
            if tool in self._gated:
                self.problems.append((seq, _ungated(seq, tool)))
            elif rule is not None and matched:
                self.problems.append(
                    (
                        seq,
                        f"INTENT seq {seq} of {tool!r} has no APPROVED before it, though its "
                        f"rule {rule.label!r} asks for one: {judge(rule, self._args(entry)).why}",
                    )
                )
            else:
                self._unapproved.setdefault(tool, seq)
            return
        request, at, input_ = approved
        if tool != request.tool_name:
            self.problems.append(
                (
                    seq,
                    f"INTENT seq {seq} runs {tool!r}, but the APPROVED row at seq {at} approved "
                    f"{request.tool_name!r} (the request at seq {request.seq})",
                )
            )
        elif entry.input != input_:
            self.problems.append(
                (
                    seq,
                    f"INTENT seq {seq} disagrees: it runs input sha256 {input_hash(entry.input)} "
                    f"but the APPROVED row at seq {at} approved the request at seq "
                    f"{request.seq}, input sha256 {input_hash(input_)}",
                )
            )

    @staticmethod
    def _args(entry: Entry) -> dict[str, Any]:
        body = payload_object(entry.input)
        return body if body is not None else {}

    def _matches(self, rule: ApprovalRule, entry: Entry) -> bool:
        """Whether ``rule`` surely asks about the call ``entry`` journals (input as stored)."""
        return judge(rule, self._args(entry)).asks is True

    def _resolution(self, entry: Entry, intent: Entry) -> None:
        """A call's outcome row: a resolution of its SUSPECT call when it records one."""
        if not any(mark in entry.payload for mark in _RESOLUTION_MARKS):
            return  # a tool's own outcome, told without parsing it (most rows are)
        body = payload_object(entry.payload)
        if body is None:
            return
        phase, seq = str(entry.phase), entry.seq
        if "signature" not in body:
            # the rows a human's resolution wrote (a tool's own result may hold any keys)
            human = set(body) - {RESOLUTION} == {"resolved_by", "result"} or (
                body.get("type") == "SuspectResolved" and body.get("effect") == "none"
            )
            if human:
                self.problems.append(
                    (
                        seq,
                        f"{phase} row at seq {seq} resolves the SUSPECT call at seq "
                        f"{intent.seq} unsigned: nothing proves who resolved it",
                    )
                )
            return
        found_hash = body.get("input_hash")
        if found_hash != intent.hash:
            self.problems.append(
                (
                    seq,
                    f"resolution seq {seq} disagrees: signed over INTENT hash {found_hash} but "
                    f"the INTENT at seq {intent.seq} hashes {intent.hash}",
                )
            )
            return
        if phase == "EXECUTED" and body.get("by") != body.get("resolved_by"):
            self.problems.append(
                (
                    seq,
                    f"resolution seq {seq} names resolver {body.get('resolved_by')!r} but is "
                    f"signed by {body.get('by')!r}",
                )
            )
            return
        if phase == "EXECUTED" and hidden_paths(to_json(body.get("result"))):
            # the signature covers the result as the resolver gave it, not as redacted
            self.unverified.append(
                (
                    seq,
                    f"the resolution at seq {seq} is signed over a result the journal holds "
                    "redacted: its signature cannot be checked from the journal",
                )
            )
            return
        self._signature(entry, phase, None)


#: the decisions about an approval request, each signed over the request's input hash
_GATE_KINDS = ("approve", "approve_edited", "reject")
#: text every resolution's outcome row holds (a signature, a resolver, a resolved failure)
_RESOLUTION_MARKS = ('"signature"', '"resolved_by"', "SuspectResolved")


def _edited(body: dict[str, Any] | None) -> bool:
    """Whether a decision row's payload records a signed edited approval (an unsigned one
    proves nothing, so its input must be the request's)."""
    return body is not None and body.get("decision") == "approve_edited" and "signature" in body


def _ungated(seq: int, tool: str) -> str:
    return (
        f"INTENT seq {seq} of {tool!r} has no APPROVED before it, though {tool!r} waits for "
        "approval in this saga"
    )


def _halt_covers(body: dict[str, Any] | None, saga_id: str) -> bool:
    halt = body.get("halt") if body is not None else None
    scope = halt.get("scope") if isinstance(halt, dict) else None
    sagas = scope.get("sagas") if isinstance(scope, dict) else None
    return sagas is None or (isinstance(sagas, list) and saga_id in sagas)
