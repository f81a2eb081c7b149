"""What humans send a saga, checked as it arrives: approve, reject, decide, resolve, abort."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, model_validator

from sagacity.evidence.decisions import Signature, Statement
from sagacity.journal.canonical import input_hash, to_json


def _plain_text(value: str) -> str:
    if any(ord(c) < 32 and c not in "\t\n" for c in value) or any(
        0xD800 <= ord(c) <= 0xDFFF for c in value
    ):
        raise ValueError("must be plain text: no NUL, control characters or lone surrogates")
    return value


def _named(value: str) -> str:
    if not value.strip():
        raise ValueError("must name someone")
    return value


#: who decided: a non-empty name or principal, as the journal will hold it
Identity = Annotated[
    str, Field(max_length=200), AfterValidator(_plain_text), AfterValidator(_named)
]


#: a reason given with a decision
Reason = Annotated[str, Field(max_length=2000), AfterValidator(_plain_text)]


#: a message for the model (or whoever made the call) given with a rejection: what to do instead
RejectMessage = Annotated[str, Field(max_length=2000), AfterValidator(_plain_text)]


#: a sha-256 in hex, as ``input_hash`` is stored
InputHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


def _absent(value: object) -> bool:
    return value is None


#: an optional message, left out of the payload when there is none: a worker of the release
#: before (which forbids unknown fields) still reads a decision that carries no message
_NO_MESSAGE = Field(default=None, exclude_if=_absent)


class _Strict(BaseModel):
    # a misspelt field (``input_hsh``) must be refused, not silently ignored
    model_config = ConfigDict(extra="forbid", strict=True)


class _Signed(_Strict):
    """A decision that may carry a signature (``docs/decisions.md``); a signed one names the
    input hash it was made for, which the signature covers."""

    #: the input hash the approver saw; must match when given, and is required with a signature
    input_hash: InputHash | None = None
    signature: Signature | None = None

    @model_validator(mode="after")
    def _hash_with_signature(self) -> _Signed:
        if self.signature is not None and self.input_hash is None:
            raise ValueError("a signed decision must name the input_hash it was made for")
        return self


def _edited_args(args: dict[str, Any] | None) -> dict[str, Any] | None:
    if args is not None:
        to_json(args)  # NaN or an infinity has no canonical JSON, so no hash to sign
    return args


#: the arguments an approver changed the call to (a JSON object): the call runs with these.
#: Left out of the payload when absent, so an approval without edits reads on older workers
EditedArgs = Annotated[
    dict[str, Any] | None,
    AfterValidator(_edited_args),
    Field(exclude_if=lambda value: value is None),
]


class Approve(_Signed):
    """Signal ``approve``: a human allows the call awaiting approval at ``journal_seq``;
    with ``args``, allows it with those arguments instead of the proposed ones."""

    journal_seq: int = Field(ge=1)
    approver: Identity
    args: EditedArgs = None

    def statement(self, saga_id: str, input_hash: str) -> Statement:
        """What a signature on this approval vouches for: the request and the input it saw
        (and an edit's arguments, by their hash)."""
        edited = edited_hash(self.args) if self.args is not None else None
        return approval_statement(
            saga_id, self.journal_seq, input_hash, self.approver, edited=edited
        )


class Reject(_Signed):
    """Signal ``reject``: a human refuses the call awaiting approval at ``journal_seq``.

    ``message`` (optional) is for whoever made the call: an agent's model gets it as the tool's
    result, so it can try another way. It is journaled and, signed, covered by the signature.
    """

    journal_seq: int = Field(ge=1)
    approver: Identity
    reason: Reason = "rejected"
    message: RejectMessage | None = _NO_MESSAGE

    def statement(self, saga_id: str, input_hash: str) -> Statement:
        """What a signature on this rejection vouches for: the request, the input it saw, the
        reason and the message (field ``result``; empty when none)."""
        return Statement(
            saga_id,
            self.journal_seq,
            input_hash,
            "reject",
            self.approver,
            self.reason,
            self.message or "",
        )


class Decision(_Signed):
    """Update ``decide``: approve or reject, answered at once (refusals raise)."""

    journal_seq: int = Field(ge=1)
    approver: Identity
    approve: bool
    reason: Reason = "rejected"
    #: a rejection's message for the model (see :class:`Reject`); an approval carries none
    message: RejectMessage | None = _NO_MESSAGE
    #: with ``approve``: the edited arguments the call runs with instead of the proposed ones
    args: EditedArgs = None

    @model_validator(mode="after")
    def _fits_the_decision(self) -> Decision:
        if self.approve and self.message is not None:
            raise ValueError("a message goes with a rejection: an approval carries none")
        if self.args is not None and not self.approve:
            raise ValueError("args (edited arguments) come with an approval only")
        return self

    def statement(self, saga_id: str, input_hash: str) -> Statement:
        """What a signature on this decision vouches for (the signal's :meth:`statement`)."""
        return self.as_signal().statement(saga_id, input_hash)

    def as_signal(self) -> Approve | Reject:
        """The same decision as the ``approve`` or ``reject`` signal would carry it."""
        if self.approve:
            return Approve.model_construct(
                journal_seq=self.journal_seq,
                approver=self.approver,
                input_hash=self.input_hash,
                signature=self.signature,
                args=self.args,
            )
        return Reject.model_construct(
            journal_seq=self.journal_seq,
            approver=self.approver,
            input_hash=self.input_hash,
            signature=self.signature,
            reason=self.reason,
            message=self.message,
        )


def edited_hash(args: dict[str, Any]) -> str:
    """What a signed edit names (the statement's ``result``): SHA-256 hex of the edited
    arguments' canonical JSON, unredacted."""
    return input_hash(to_json(args))


def approval_statement(
    saga_id: str, seq: int, request_hash: str, approver: str, *, edited: str | None = None
) -> Statement:
    """What a signed approval of the request at ``seq`` vouches for; ``edited``: the
    :func:`edited_hash` of the arguments it changed the call to (``approve_edited``)."""
    return Statement(
        saga_id=saga_id,
        seq=seq,
        input_hash=request_hash,
        decision="approve" if edited is None else "approve_edited",
        principal=approver,
        result=edited or "",
    )


class Resolve(_Strict):
    """Signal ``resolve``: a human says whether a SUSPECT call took effect."""

    call_seq: int = Field(ge=1)
    resolver: Identity
    happened: bool
    #: what the call returned, when it happened and a later step needs it
    result: Any = None
    #: required with a keyring: the signature over the resolution, naming the INTENT row's hash
    signature: Signature | None = None


def resolution_statement(saga_id: str, intent_hash: str, resolution: Resolve) -> Statement:
    """What a signed resolution vouches for: the call whose INTENT row hashed ``intent_hash``."""
    return Statement(
        saga_id=saga_id,
        seq=resolution.call_seq,
        input_hash=intent_hash,
        decision="happened" if resolution.happened else "not_happened",
        principal=resolution.resolver,
        result=to_json(resolution.result) if resolution.happened else "",
    )


class Abort(_Strict):
    """Signal ``abort``: stop the saga and compensate what ran.

    ``signature`` (optional) is over :meth:`statement`; with a keyring, a verified one journals
    ``by`` as the principal, anything else as ``unverified:<by>``. An abort is never refused: it
    only makes the saga safer.
    """

    reason: Reason = "aborted"
    by: Identity | None = None
    signature: Signature | None = None

    def statement(self, saga_id: str) -> Statement:
        """What a signature on this abort vouches for: this saga, this reason, this sender."""
        return Statement(
            saga_id=saga_id,
            seq=0,
            input_hash="",
            decision="abort",
            principal=self.by or "",
            reason=self.reason,
        )


DecisionKind = Literal["approve", "reject"]
