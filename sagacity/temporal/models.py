"""Data that crosses Temporal: workflow inputs and results, activity requests, signals, queries."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from enum import StrEnum
from functools import cache, cached_property
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    model_serializer,
    model_validator,
)

from sagacity.evidence.decisions import Keyring, Policy, Signature, Statement, halt_statement
from sagacity.journal.canonical import to_json
from sagacity.journal.chain import GENESIS_HASH
from sagacity.journal.phases import Phase
from sagacity.tools import Reversibility


class Lean(BaseModel):
    """A model that travels in workflow history: its payloads leave out the fields that hold
    their default, which read back as that default.

    Most of a call's optional fields are unset on most calls; left in, they were a third of the
    bytes each tool call adds to history.
    """

    @model_serializer(mode="wrap")
    def _without_defaults(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for name, default in _defaults(type(self)):
            if getattr(self, name) == default:
                data.pop(name, None)
        return data


@cache
def _defaults(model: type[BaseModel]) -> tuple[tuple[str, Any], ...]:
    """``model``'s optional fields and their defaults, made once per class: every payload of a
    tool call is serialized through :class:`Lean` (the defaults are compared, never handed out)."""
    return tuple(
        (name, field.get_default(call_default_factory=True, validated_data={}))
        for name, field in model.model_fields.items()
        if not field.is_required()
    )


class ToolSpec(Lean):
    """What workflow code may know of a tool: enough to gate, order and describe it.

    ``description`` and ``params_schema`` are empty in the brief catalog a saga opens with;
    :meth:`Saga.tools` with ``described=True`` fills them in.
    """

    name: str
    description: str = ""
    reversibility: Reversibility
    idempotent: bool
    has_compensation: bool
    params_schema: dict[str, Any] = Field(default_factory=dict)
    timeout_s: float
    heartbeat_timeout_s: float
    #: the declared function (``module.qualname``), which a typed call must name (absent in
    #: older histories: not checked)
    origin: str = ""


class RowRef(Lean):
    """A journal row as the workflow tracks it (the full row lives in Postgres)."""

    seq: int
    tool_name: str
    phase: Phase
    hash: str
    #: the activity that wrote the row sealed it as the saga's end (said only when true)
    sealed: bool = False


class Head(BaseModel):
    """The chain head: the last row's seq and hash (seq 0 and the genesis hash when empty)."""

    seq: int = 0
    hash: str = GENESIS_HASH


class RowDraft(BaseModel):
    tool_name: str
    phase: Phase
    input: str = ""
    payload: str = ""
    #: take ``input`` from the journal row at this seq (an effect carried by reference)
    input_of: int | None = None


class AppendRequest(BaseModel):
    """Consecutive rows to write at ``seq`` onward, chained to ``prev_hash``."""

    saga_id: str
    seq: int
    prev_hash: str
    rows: list[RowDraft]


class ErrorInfo(BaseModel):
    type: str
    message: str


class CallRequest(Lean):
    """One tool call: INTENT at ``seq``, its outcome at ``seq + 1``."""

    saga_id: str
    seq: int
    prev_hash: str
    tool_name: str
    args: dict[str, Any]
    #: seq of the AWAITING_APPROVAL row whose request must verify before the tool runs
    approval_seq: int | None = None
    #: sha-256 of the unredacted input when the approval was requested: the call about to run
    #: must be that one, whatever the redaction rules are by then
    approved_input_hash: str | None = None
    #: the stored request's ``input_hash`` when it was made: an edited request does not verify
    approved_request_hash: str | None = None
    #: the saga ends in this state if the call executes: its outcome row is sealed as the end
    seal_as: SagaState | None = None
    #: the head this call follows was sealed, or written by an earlier run: checkpoint INTENT,
    #: so a verifier never sees it as a row after the end while the call runs
    anchor_intent: bool = False
    #: who approved, and their signature: checked against the worker's keyring before INTENT
    approver: str | None = None
    approval_signature: Signature | None = None

    @cached_property
    def input_json(self) -> str:
        """The arguments as journaled; derived here rather than sent twice per call."""
        return to_json(self.args)


class ResolveRequest(BaseModel):
    """A human's word on the SUSPECT call whose INTENT is at ``call_seq``."""

    saga_id: str
    call_seq: int
    row: RowDraft
    #: the approval request the call ran under, consumed with the resolution
    approval_seq: int | None = None
    #: the human's resolution ``row`` records, checked against the worker's keyring and policy
    #: before it is written; None when no human spoke (an abort, a lost attempt)
    resolution: Resolve | None = None


def failure_payload(error: ErrorInfo, *, effect_unknown: bool) -> str:
    """A FAILED row's payload: the error, and whether the call may have taken effect."""
    return to_json(
        {
            "type": error.type,
            "message": error.message,
            "effect": "unknown" if effect_unknown else "none",
        }
    )


class CallStatus(StrEnum):
    EXECUTED = "executed"
    FAILED = "failed"
    #: the approved input did not verify; REJECTED was journaled instead of INTENT
    REFUSED = "refused"


class Journaled(BaseModel):
    """A call as the journal holds it, its secrets redacted: what status and results show."""

    input: dict[str, Any] = Field(default_factory=dict)
    result: Any = None


class CallOutcome(Lean):
    """How a call ended. ``result`` is what the tool returned, secrets and all (later steps and
    compensations get it); ``journaled`` is set when redaction changed the call's input or
    result, and is what the saga shows of it."""

    status: CallStatus
    result: Any = None
    error: ErrorInfo | None = None
    rows: list[RowRef]
    #: FAILED, and the tool may have taken effect before it failed: compensate it or tell a human
    effect_unknown: bool = False
    journaled: Journaled | None = None
    #: EXECUTED, but the workflow does not hold the tool's real result: too big to hand it
    #: (``error`` says so), or none is to be had (redacted in the row a retry read, never
    #: journaled); the compensation reads the journal, which says which (``read_result``)
    result_withheld: bool = False


class Resolved(BaseModel):
    """The SUSPECT call's outcome; ``recorded`` is False when the journal already held one."""

    outcome: CallOutcome
    recorded: bool


class CompensateRequest(Lean):
    saga_id: str
    seq: int
    prev_hash: str
    tool_name: str
    call_seq: int
    input_json: str
    result: Any = None
    #: the call FAILED with its effect unknown (``result`` is None)
    failed: bool = False
    #: input and result are to be read from the journal rows of ``call_seq``
    by_ref: bool = False
    #: only the result is (the workflow holds no real one: too big, or none to be had)
    result_by_ref: bool = False
    #: this is the saga's last row: seal it as the end, in this state
    seal_as: SagaState | None = None


#: the detail a compensation's permanent failure ends with: the attempt it failed on
_UNDO_ATTEMPT = "sagacity_undo_attempt"


def undo_attempt_detail(attempt: int) -> dict[str, int]:
    """The last detail of a compensation's permanent failure: the attempt that raised it, so the
    workflow journals how many attempts were made (the activity's failure does not say)."""
    return {_UNDO_ATTEMPT: attempt}


def undo_attempt(details: Sequence[Any]) -> int | None:
    """The attempt :func:`undo_attempt_detail` names in a failure's ``details``, if it does."""
    last = details[-1] if details else None
    attempt = last.get(_UNDO_ATTEMPT) if isinstance(last, dict) else None
    return attempt if isinstance(attempt, int) else None


class Compensating(BaseModel):
    """The compensation under way while a saga compensates, and how its attempts went.

    The saga's ``status`` query names the effect; ``attempt`` and ``last_error`` are Temporal's
    (from its description of the workflow, :mod:`sagacity.temporal.undo_attempts`), filled in
    by ``saga status``, the console and the HTTP API.
    """

    tool_name: str
    call_seq: int
    #: the attempt running now, or due next once its backoff has passed
    attempt: int = 1
    #: the previous attempt's error, ``Type: message``; None before any attempt failed
    last_error: str | None = None
    #: when the next attempt starts, while the undo waits out its backoff
    next_attempt_at: datetime | None = None

    @property
    def failed_attempts(self) -> int:
        return self.attempt - 1 if self.last_error is not None else 0


class ApprovalOpen(BaseModel):
    """Journal AWAITING_APPROVAL at ``seq`` and persist the approval request."""

    saga_id: str
    seq: int
    prev_hash: str
    tool_name: str
    input_json: str
    #: how long the saga waits for a decision: the request shows its deadline without a query
    deadline_s: float | None = None


class ApprovalOpened(BaseModel):
    """The AWAITING_APPROVAL row and the request as stored (input redacted, its hash)."""

    rows: list[RowRef]
    input: str
    input_hash: str
    #: sha-256 of the unredacted input the request was made for
    raw_input_hash: str | None = None
    #: where ``input`` hides a field (JSON Pointers)
    hidden: list[str] = Field(default_factory=list)


class ApprovalClose(BaseModel):
    saga_id: str
    journal_seq: int


class Effect(BaseModel):
    """A tool call that took effect (or may have), named by its INTENT seq.

    ``input`` and ``result`` are as journaled, secrets redacted; the saga keeps the originals
    apart, for the compensation.
    """

    tool_name: str
    call_seq: int
    reversibility: Reversibility
    input: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    #: the call FAILED with its effect unknown; compensating it must cope with no effect
    failed: bool = False
    #: carried across continue-as-new by reference: input and result are read from the journal
    by_ref: bool = False


class EffectRefs(BaseModel):
    """Effects by reference, compact enough to carry tens of thousands across continue-as-new.

    ``seqs[i]`` is a call's INTENT seq and ``tools[tool_of[i]]`` its tool; ``failed`` lists the
    seqs of calls that FAILED with their effect unknown. Inputs and results stay in the journal.
    """

    tools: list[str] = Field(default_factory=list)
    seqs: list[int] = Field(default_factory=list)
    tool_of: list[int] = Field(default_factory=list)
    failed: list[int] = Field(default_factory=list)

    @classmethod
    def of(cls, effects: list[Effect]) -> EffectRefs:
        tools: list[str] = []
        index: dict[str, int] = {}
        for effect in effects:
            index.setdefault(effect.tool_name, len(tools))
            if len(index) > len(tools):
                tools.append(effect.tool_name)
        # every field passed explicitly: the Agents SDK's converter leaves out fields not set
        return cls(
            tools=tools,
            seqs=[e.call_seq for e in effects],
            tool_of=[index[e.tool_name] for e in effects],
            failed=[e.call_seq for e in effects if e.failed],
        )

    def effects(self, reversibility: dict[str, Reversibility]) -> list[Effect]:
        failed = set(self.failed)
        return [
            Effect(
                tool_name=self.tools[t],
                call_seq=seq,
                reversibility=reversibility.get(self.tools[t], Reversibility.IRREVERSIBLE),
                failed=seq in failed,
                by_ref=True,
            )
            for seq, t in zip(self.seqs, self.tool_of, strict=True)
        ]


class Original(BaseModel):
    """The unredacted input and result of the effect at ``call_seq``, for its compensation."""

    call_seq: int
    input: dict[str, Any]
    result: Any = None
    #: the result was too big to hand the workflow: the compensation reads it from the journal
    result_in_journal: bool = False


class SagaOpen(Lean):
    """Claim ``saga_id``'s journal for this workflow's run chain and read it after ``after_seq``."""

    saga_id: str
    workflow_id: str
    #: the first run of the chain (resets, retries and continue-as-new keep it)
    first_run_id: str
    after_seq: int = 0
    #: the hash this run holds for ``after_seq``; the journal must agree
    after_hash: str = GENESIS_HASH
    #: rows returned at most; ``more`` says whether the journal goes on
    limit: int = 500


class JournalRow(BaseModel):
    """A stored row as the workflow re-reads it to catch up with the journal."""

    seq: int
    tool_name: str
    phase: Phase
    hash: str
    input: str
    payload: str
    #: the row's payload (a call's result) is too large to hand the workflow, and was left out:
    #: the journal holds it (``input`` of an outcome row may be left out too, unread anyway)
    withheld: bool = False


class SagaOpened(Lean):
    """The worker's tool catalog and the journal rows this run has not seen."""

    tools: list[ToolSpec]
    rows: list[JournalRow]
    more: bool = False
    #: ``tools`` lack descriptions and schemas (absent in older histories, whose catalog has them)
    brief: bool = False
    #: the worker signs checkpoints, so the saga seals its end (absent in older histories)
    seals: bool = False
    #: a call or compensation that writes the saga's last row seals it in the same activity, so
    #: the end needs no local activity (absent in older histories: they seal with one)
    seals_in_calls: bool = False
    #: those activities say whether they sealed (``RowRef.sealed``): a seal asked of an activity
    #: that did not write it (an older worker, a refused write) is left to the local activity
    seals_reported: bool = False
    #: the keys decisions must be signed with; None: unsigned decisions are taken (dev mode)
    keyring: Keyring | None = None
    #: who may decide and resolve, as the worker is configured (absent in older histories)
    policy: Policy | None = None
    #: the namespace has the visibility search attributes, so the saga shows its state in them
    #: (absent in older histories and on namespaces without them: no upserts)
    visible: bool = False


class SagaState(StrEnum):
    RUNNING = "running"
    AWAITING_APPROVAL = "awaiting_approval"
    SUSPECT = "suspect"
    COMPENSATING = "compensating"
    COMPLETED = "completed"
    COMPENSATED = "compensated"
    COMPENSATION_FAILED = "compensation_failed"
    ABORTED = "aborted"
    #: an operator's halt or quarantine holds the saga before its next call or compensation
    HALTED = "halted"


#: rows (and effects) the ``status`` query returns, newest last; the journal has them all
STATUS_ROWS = 200
#: compensated effects a :class:`SagaResult` lists (payloads have a size limit)
RESULT_EFFECTS = 1000

TERMINAL_STATES = frozenset(
    {SagaState.COMPLETED, SagaState.COMPENSATED, SagaState.COMPENSATION_FAILED, SagaState.ABORTED}
)


class SealRequest(BaseModel):
    """A saga's end to seal: its final head and the terminal state it ended in."""

    saga_id: str
    head: Head
    state: SagaState


class SagaOptions(BaseModel):
    """Per-saga behaviour, chosen by whoever starts the saga."""

    #: how long an IRREVERSIBLE call waits for a decision before it is rejected as ``timeout``
    approval_deadline_s: float = 7 * 24 * 3600
    #: who may approve: tool name (or ``"*"``) to identities; ``None`` lets any named approver decide
    approvers: dict[str, list[str]] | None = None
    #: attempts at each compensation before COMPENSATION_FAILED is journaled; with the backoff
    #: below (doubling, capped) the default keeps trying for about 8 minutes, longer than a
    #: database restart, so an outage alone never ends in COMPENSATION_FAILED
    compensation_attempts: int = Field(default=20, ge=1)
    compensation_backoff_s: float = Field(default=1.0, gt=0)
    compensation_max_interval_s: float = Field(default=30.0, gt=0)
    #: attempts at an idempotent tool that keeps raising, before FAILED is journaled
    idempotent_attempts: int = Field(default=3, ge=1)
    #: overrides every tool's heartbeat timeout: how soon a dead worker's call is noticed
    heartbeat_timeout_s: float | None = Field(default=None, gt=0)
    #: continue as new once history has this many events (besides whenever Temporal suggests
    #: it), so a saga of any length never reaches Temporal's history limit
    continue_as_new_events: int = Field(default=10_000, ge=50)


class Step(BaseModel):
    """One step of a declarative saga. ``args`` values may be ``{"$ref": "step_id[.field…]"}``."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    id: str | None = None

    @property
    def key(self) -> str:
        return self.id or self.tool


class StepsCheck(BaseModel):
    """A declarative saga's steps, for the worker to check before any of them runs."""

    steps: list[Step]


class StepsChecked(BaseModel):
    """What is wrong with the steps (empty: they can run), each naming the step and the fix."""

    problems: list[str] = Field(default_factory=list)


class SagaCarry(BaseModel):
    """A saga's state handed from one run to the next by continue-as-new: seq goes on."""

    saga_id: str
    head: Head
    rows: list[RowRef] = Field(default_factory=list)
    executed: EffectRefs = Field(default_factory=EffectRefs)
    adoptable: list[Effect] = Field(default_factory=list)
    failures: list[ErrorInfo] = Field(default_factory=list)
    needs_attention: str | None = None
    refused: list[str] = Field(default_factory=list)
    decided: list[int] = Field(default_factory=list)
    abort: Abort | None = None
    #: how ``abort`` came: as a signal (its sender is checked), by a Temporal cancel, or for an
    #: operator's halt (whose signature proves who halted); none of them: the workflow's own code
    abort_signalled: bool = False
    cancelled: bool = False
    abort_halt: HaltNotice | None = None
    #: set when the saga was compensating: why, and what is undone, failed or left so far
    error: ErrorInfo | None = None
    compensated: EffectRefs = Field(default_factory=EffectRefs)
    compensation_failed: EffectRefs = Field(default_factory=EffectRefs)
    live: EffectRefs = Field(default_factory=EffectRefs)
    #: the unredacted input and result of live effects whose journal rows are redacted
    originals: list[Original] = Field(default_factory=list)


class SagaProgress(BaseModel):
    """Where a declarative saga continued as new: the next step and earlier steps' results."""

    next_step: int
    results: dict[str, Any] = Field(default_factory=dict)
    #: the results redaction changed, as journaled (what the saga's result shows)
    shown: dict[str, Any] = Field(default_factory=dict)
    carry: SagaCarry


class SagaSpec(BaseModel):
    steps: list[Step]
    options: SagaOptions = Field(default_factory=SagaOptions)
    #: set by the saga itself when it continues as new; None when a client starts it
    progress: SagaProgress | None = None


class SagaResult(BaseModel):
    """How a saga ended, what it undid and what it leaves in the world."""

    saga_id: str
    status: SagaState
    value: Any = None
    error: ErrorInfo | None = None
    #: the newest :data:`RESULT_EFFECTS` compensated effects (``compensated_count`` has them all)
    compensated: list[Effect] = Field(default_factory=list)
    compensation_failed: list[Effect] = Field(default_factory=list)
    live_effects: list[Effect] = Field(default_factory=list)
    needs_attention: str | None = None
    head: Head
    compensated_count: int = 0


class PendingApproval(BaseModel):
    journal_seq: int
    tool_name: str
    #: the request as stored: secrets redacted (a keyed fingerprint each, or removed)
    input_json: str
    input_hash: str
    deadline_s: float
    #: where ``input_json`` hides a field (JSON Pointers)
    hidden: list[str] = Field(default_factory=list)


class Suspect(BaseModel):
    call_seq: int
    tool_name: str
    #: the call's input as its INTENT row journaled it (secrets redacted)
    input_json: str
    reason: str
    #: the INTENT row's chain hash: what a signed resolution names (empty when not known)
    intent_hash: str = ""


class SagaStatus(BaseModel):
    saga_id: str
    state: SagaState
    head: Head
    #: the newest rows (at most :data:`STATUS_ROWS`; the journal has them all)
    rows: list[RowRef]
    #: the newest live effects (at most :data:`STATUS_ROWS`; ``executed_count`` counts them all)
    executed: list[Effect]
    #: the tool whose call is in flight, if any
    running: str | None = None
    pending_approval: PendingApproval | None = None
    suspect: Suspect | None = None
    refused_decisions: list[str] = Field(default_factory=list)
    needs_attention: str | None = None
    executed_count: int = 0
    #: the halt or quarantine the saga waits on, if any
    halted: HaltNotice | None = None
    #: the effect being undone, while the saga compensates
    compensating: Compensating | None = None


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
#: a sha-256 in hex, as ``input_hash`` is stored
InputHash = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


#: the longest halt scope a signal may carry (as JSON): the saga hands it on to an activity
MAX_HALT_SCOPE_CHARS = 100_000


def _halt_scope(scope: dict[str, Any]) -> dict[str, Any]:
    """A halt scope as ``HaltScope.as_json`` writes it, and small enough to pass on."""
    if not set(scope) <= {"tool", "task_queue", "sagas"}:
        raise ValueError("a halt's scope has only tool, task_queue and sagas")
    if len(to_json(scope)) > MAX_HALT_SCOPE_CHARS:
        raise ValueError(f"a halt's scope is at most {MAX_HALT_SCOPE_CHARS} characters of JSON")
    return scope


class HaltNotice(BaseModel):
    """An operator's halt, as a saga meets it: from an activity it refused, or by signal.

    ``keep``: the saga waits before its next call or compensation until the halt is lifted.
    ``compensate``: it aborts, undoing what it can (a call waiting for approval stays waiting).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    #: 0: a halt the worker could not name
    halt_id: int = Field(ge=0)
    kind: Literal["halt", "quarantine"] = "halt"
    policy: Literal["keep", "compensate"] = "keep"
    reason: Reason = ""
    operator: Identity | None = None
    #: the call's INTENT was written before the halt (a retry found it): if the saga aborts
    #: instead of running it, its effect is unknown and compensated
    intent_written: bool = False
    #: the halt's scope as recorded (``HaltScope.as_json``) and the operator's signature over
    #: the halt (:meth:`statement`): what proves it without a look at the halt store
    scope: Annotated[dict[str, Any], AfterValidator(_halt_scope)] | None = None
    signature: Signature | None = None

    def describe(self) -> str:
        who = f" by {self.operator}" if self.operator else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.kind} {self.halt_id}{who} ({self.policy}){why}"

    def statement(self) -> Statement | None:
        """What the operator signed to halt (None: the notice does not say the scope)."""
        if self.scope is None:
            return None
        return halt_statement(
            kind=self.kind,
            policy=self.policy,
            scope=self.scope,
            operator=self.operator or "",
            reason=self.reason,
        )

    def record(self) -> dict[str, Any]:
        """The halt as an abort's journal row records it (``docs/decisions.md``)."""
        return {"id": self.halt_id, "kind": self.kind, "policy": self.policy, "scope": self.scope}

    def covers(self, saga_id: str, task_queue: str) -> bool:
        """Whether the halt's scope aborts saga ``saga_id`` on ``task_queue`` by itself (a
        tool's halt holds calls of that tool only; an unknown scope covers nothing)."""
        scope = self.scope
        if scope is None or scope.get("tool") is not None:
            return False
        sagas = scope.get("sagas")
        queue = scope.get("task_queue")
        return (sagas is None or saga_id in sagas) and queue in (None, task_queue)


class HaltLookup(BaseModel):
    """Is the ``halt`` signal ``told`` real, and does it abort saga ``saga_id``?"""

    saga_id: str
    told: HaltNotice


class HaltLookedUp(BaseModel):
    """The halt that aborts the saga (from the halt store, else the signal its signature
    proves), or why the signal is refused."""

    notice: HaltNotice | None = None
    refusal: str = ""


class Resume(BaseModel):
    """The ``resume`` signal: a halt was lifted, so a held saga tries its next step again."""

    model_config = ConfigDict(extra="forbid", strict=True)

    halt_id: int | None = Field(default=None, ge=1)
    operator: Identity | None = None


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


class Approve(_Signed):
    """Signal ``approve``: a human allows the call awaiting approval at ``journal_seq``."""

    journal_seq: int = Field(ge=1)
    approver: Identity


class Reject(_Signed):
    """Signal ``reject``: a human refuses the call awaiting approval at ``journal_seq``."""

    journal_seq: int = Field(ge=1)
    approver: Identity
    reason: Reason = "rejected"


class Decision(_Signed):
    """Update ``decide``: approve or reject, answered at once (refusals raise)."""

    journal_seq: int = Field(ge=1)
    approver: Identity
    approve: bool
    reason: Reason = "rejected"

    def as_signal(self) -> Approve | Reject:
        """The same decision as the ``approve`` or ``reject`` signal would carry it."""
        if self.approve:
            return Approve.model_construct(
                journal_seq=self.journal_seq,
                approver=self.approver,
                input_hash=self.input_hash,
                signature=self.signature,
            )
        return Reject.model_construct(
            journal_seq=self.journal_seq,
            approver=self.approver,
            input_hash=self.input_hash,
            signature=self.signature,
            reason=self.reason,
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


ResolveRequest.model_rebuild()
SagaCarry.model_rebuild()
SagaProgress.model_rebuild()
SagaSpec.model_rebuild()
