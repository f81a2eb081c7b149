"""Pending approvals as people see them, and decisions taken through the saga's ``decide`` update.

A request is listed from ``sagacity_approval_request`` and joined with what its saga says now (the
``status`` query), so a stale or altered row is visible as such. A decision is checked here first
(allow-list, seq, already decided, input hash) for a precise refusal, signed (with a
:class:`~sagacity.evidence.decisions.Signer`: the approver's own key, or the service's on behalf
of the principal it authenticated) over the input hash the saga waits with, then sent as the
``decide`` update, whose validator in the workflow has the last word (its keyring and policy);
either way a refused decision changes nothing and raises an
:class:`~sagacity.errors.ApprovalRefused` subclass.
"""

from __future__ import annotations

import asyncio
import builtins
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client, WorkflowUpdateFailedError
from temporalio.service import RPCError, RPCStatusCode

from sagacity.approvals.live import Live, live_status
from sagacity.approvals.suspects import Resolution, SagaView, resolve_suspect, saga_view
from sagacity.errors import (
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalRefused,
    ApproverNotAllowed,
    DecisionUnsigned,
    InvalidInput,
    SagaUnavailable,
    SettingsError,
)
from sagacity.evidence.decisions import (
    Keyring,
    Signer,
    allowed,
    permitted,
    signer_refusal,
)
from sagacity.evidence.redaction import hidden_paths
from sagacity.inputs import invalid
from sagacity.journal import Phase, input_hash
from sagacity.store.approvals import ApprovalRequest, ApprovalStore, InboxFilter
from sagacity.store.journal import JournalStore
from sagacity.temporal.failures import error_type
from sagacity.temporal.models import (
    Decision,
    PendingApproval,
    SagaState,
    SagaStatus,
)
from sagacity.temporal.names import SAGA_BUSY

__all__ = [
    "CURSOR_PATTERN",
    "MAX_PAGE",
    "ApprovalService",
    "DecisionResult",
    "Inbox",
    "InboxFilter",
    "PendingRequest",
    "RequestEscalation",
    "inbox_filter",
]


class RequestEscalation(BaseModel):
    """How a request past its SLA was escalated: the next tier notified, once."""

    at: datetime = Field(description="when the saga escalated the request")
    to: str = Field(
        default="",
        description="where the notification went: the webhook's scheme and host (empty: no "
        "webhook is configured, the escalation is only recorded)",
    )
    state: str = Field(
        description="posting, sent, failed (tried again with backoff), unknown (a worker "
        "stopped mid-POST: not posted again), recorded (no webhook), pending (not yet tried)"
    )
    attempts: int = Field(default=0, description="POST attempts so far")
    error: str | None = Field(default=None, description="the last attempt's failure")


class PendingRequest(BaseModel):
    """A stored approval request, and what its saga is doing now."""

    saga_id: str
    journal_seq: int = Field(description="seq of the request's AWAITING_APPROVAL journal row")
    tool_name: str
    input: str = Field(
        description="the call's input: JSON text exactly as journaled and hashed; a redacted "
        'field is `{"$redacted": "hmac:<key id>:<hex>"}`, a keyed fingerprint of its value '
        '(different values differ), or `{"$redacted": "removed"}`'
    )
    input_hash: str = Field(description="SHA-256 (hex) of `input` as stored with the request")
    hidden: list[str] = Field(
        default_factory=list,
        description="where `input` hides a field's value (JSON Pointers)",
    )
    why: str | None = Field(
        default=None,
        description="why the tool's `needs_approval` rule asked for this call (\"rule 'large "
        "refund': amount 1500 > 1000\"), as the saga tells while it waits; null for a call "
        "of an IRREVERSIBLE tool (every one asks), or when the saga does not answer",
    )
    requested_at: datetime
    workflow_status: str = Field(
        description="running, completed, failed, terminated, …; not_found; or no_answer when "
        "the saga did not answer its status query (no worker polling its task queue)"
    )
    saga_state: SagaState | None = Field(description="the saga's state while it is running")
    waiting: bool = Field(description="the saga is waiting for a decision on this very request")
    deadline: datetime | None = Field(
        description="about when the saga rejects the call as `timeout`; null when it waits "
        "until decided, or for a request stored before deadlines were (then shown while waiting)"
    )
    deciders: list[str] | None = Field(
        default=None,
        description="who may decide this call (SAGACITY_APPROVERS for its tool); null: anyone "
        "whose decision the keyring accepts",
    )
    intact: bool = Field(
        description="the stored input hashes to `input_hash`, which is the hash the saga waits "
        "for; false means the row was altered and approving it will not run it"
    )
    escalation: RequestEscalation | None = Field(
        default=None,
        description="the request waited past its SLA and the next tier was notified; null: not "
        "escalated",
    )
    approvals: RequestQuorum | None = Field(
        default=None,
        description="the tool's approval policy needs several approvers: how far it is, as the "
        "saga tells while it waits (null: one approval decides, or the saga does not answer)",
    )


class RequestQuorum(BaseModel):
    """A request whose tool needs several approvals: how many, from whom, who approved so far."""

    required: int = Field(description="approvals by distinct principals the call needs")
    group: str = Field(
        default="", description="the keyring group approvers come from ('': any principal)"
    )
    approved_by: list[str] = Field(
        default_factory=list, description="who approved so far, in order"
    )
    started_by: str | None = Field(
        default=None, description="who started the saga (null: not said)"
    )
    starter_may_approve: bool = Field(
        default=True, description="false: the saga's starter's approval is refused"
    )

    @property
    def line(self) -> str:
        """ "1 of 2 approvals (finance): alice", as the CLI and the console say it."""
        group = f" ({self.group})" if self.group else ""
        who = f": {', '.join(self.approved_by)}" if self.approved_by else ""
        return f"{len(self.approved_by)} of {self.required} approvals{group}{who}"


class Inbox(BaseModel):
    """One page of waiting requests, oldest first, and how many the filter matches in all."""

    requests: list[PendingRequest]
    total: int = Field(description="requests the filter matches, on every page")
    by_tool: dict[str, int] = Field(
        description="requests per tool that the filter matches, whatever tools it names"
    )
    next: str | None = Field(description="pass as `after` for the next page; null on the last page")


class DecisionResult(BaseModel):
    """A decision the saga took and journaled (APPROVED or REJECTED)."""

    saga_id: str
    journal_seq: int
    tool_name: str
    decision: Literal["approved", "rejected"]
    approver: str
    reason: str | None = None
    #: a rejection's message for the model, as journaled (None: none was given)
    message: str | None = None
    edited: bool = Field(
        default=False, description="approved with changed arguments: the call runs with those"
    )
    awaiting: str | None = Field(
        default=None,
        description="a co-approval the tool's approval policy counts, with more still needed: "
        "'1 of 2' (the request stays open, nothing is journaled yet)",
    )


def check_signer(signer: Signer | None, keyring: Keyring | None, principal: str) -> None:
    """:class:`DecisionUnsigned` when ``keyring`` would refuse what ``signer`` signs as
    ``principal``."""
    why = signer_refusal(signer, keyring, principal)
    if why is not None:
        raise DecisionUnsigned(why)


class ApprovalService:
    """Lists pending approvals and takes decisions on them, as a named approver.

    ``approvals`` (the stored requests) is needed to list and show them (:meth:`inbox`,
    :meth:`get`), not to decide one a saga waits with.
    ``approvers`` and ``resolvers`` are the policy checked here for a precise early refusal
    (tool name or ``"*"`` to identities; None lets anyone); the worker enforces the same policy
    (``SAGACITY_APPROVERS``, ``SAGACITY_RESOLVERS``) for every route, raw signals included, and a
    saga started with ``SagaOptions.approvers`` its own list too. ``signer`` signs each decision
    and resolution; with ``keyring``, one it cannot sign as the keyring requires is refused here.

    It also shows a saga's SUSPECT call and sends a resolution of it (:meth:`saga`,
    :meth:`resolve`); with ``journal``, the call's input is read from its INTENT row (redacted)
    and the outcome the resolution journaled is reported.
    """

    def __init__(
        self,
        client: Client,
        approvals: ApprovalStore | None = None,
        *,
        approvers: Mapping[str, Sequence[str]] | None = None,
        resolvers: Mapping[str, Sequence[str]] | None = None,
        signer: Signer | None = None,
        keyring: Keyring | None = None,
        journal: JournalStore | None = None,
        concurrency: int = 32,
        rpc_timeout: timedelta = timedelta(seconds=5),
    ) -> None:
        self._client = client
        self._store = approvals
        self._journal = journal
        self.approvers = approvers
        self.resolvers = resolvers
        self.signer = signer
        self.keyring = keyring
        self._concurrency = concurrency
        self._rpc_timeout = rpc_timeout
        # resolutions of one saga are sent one at a time, so the second of two identical
        # requests sees the first taken (409) instead of racing it to the saga
        self._resolving: dict[str, tuple[asyncio.Lock, int]] = {}

    async def inbox(
        self, where: InboxFilter | None = None, *, after: str | None = None, limit: int = 50
    ) -> Inbox:
        """A page of the requests ``where`` matches, oldest first, from the cursor ``after`` (an
        :attr:`Inbox.next`), with counts. Only the page's sagas are asked their live status, so
        a page costs the same with ten requests waiting or ten thousand."""
        if not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"limit must be 1 to {MAX_PAGE}, got {limit}")
        requests, counts = await asyncio.gather(
            self.approvals.page(where, after=_cursor(after), limit=limit + 1),
            self.approvals.counts(where),
        )
        more = len(requests) > limit
        requests = requests[:limit]
        gate = asyncio.Semaphore(self._concurrency)

        async def ask(sid: str) -> tuple[str, Live]:
            async with gate:
                return sid, await self._live(sid)

        lives = dict(await asyncio.gather(*(ask(sid) for sid in {r.saga_id for r in requests})))
        return Inbox(
            requests=[self._view(r, lives[r.saga_id]) for r in requests],
            total=counts.total,
            by_tool=counts.by_tool,
            next=_encode_cursor(requests[-1]) if more else None,
        )

    @property
    def client(self) -> Client:
        """The Temporal client the service reaches sagas through."""
        return self._client

    @property
    def approvals(self) -> ApprovalStore:
        """Where the waiting requests are stored."""
        if self._store is None:
            raise SettingsError("this approval service was given no store of the requests")
        return self._store

    @property
    def journal(self) -> JournalStore | None:
        """The journal the service reads calls' inputs and outcomes from, when it has one."""
        return self._journal

    def deciders(self, tool_name: str) -> builtins.list[str] | None:
        """Who may decide calls of ``tool_name`` here (None: anyone the keyring accepts)."""
        return permitted(self.approvers, tool_name)

    async def get(self, saga_id: str, journal_seq: int) -> PendingRequest:
        """One stored request with its saga's live status; :class:`ApprovalNotFound` if none."""
        request = await self.approvals.get(saga_id, journal_seq)
        if request is None:
            raise ApprovalNotFound(
                f"no approval request is pending for saga {saga_id!r} at seq {journal_seq}"
            )
        return self._view(request, await self._live(saga_id))

    async def approve(
        self,
        saga_id: str,
        journal_seq: int,
        *,
        approver: str,
        input_hash: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> DecisionResult:
        """Approve the call; with ``input_hash``, only if it is the input the approver saw;
        with ``args``, changed to those arguments (checked against the tool by the saga first:
        :class:`InvalidInput` when they do not fit, and the request stays open).

        Returns once APPROVED is journaled; the call itself runs after that.
        """
        decision = _decision(
            journal_seq=journal_seq,
            approver=approver,
            approve=True,
            input_hash=input_hash,
            **({} if args is None else {"args": args}),
        )
        return await self._decide(saga_id, decision)

    async def reject(
        self,
        saga_id: str,
        journal_seq: int,
        *,
        approver: str,
        reason: str,
        message: str | None = None,
    ) -> DecisionResult:
        """Reject the call; returns once REJECTED is journaled (the saga then compensates, or an
        agent's model is told, ``message`` included, and may try another way)."""
        decision = _decision(
            journal_seq=journal_seq,
            approver=approver,
            approve=False,
            reason=reason,
            message=message,
        )
        return await self._decide(saga_id, decision)

    async def saga(self, saga_id: str) -> SagaView:
        """What the saga says now, its SUSPECT call included."""
        return await saga_view(
            self._client, saga_id, journal=self._journal, rpc_timeout=self._rpc_timeout
        )

    async def resolve(
        self, saga_id: str, call_seq: int, *, resolver: str, happened: bool, result: Any = None
    ) -> Resolution:
        """Say whether the SUSPECT call at ``call_seq`` took effect; returns once the saga took it.

        See :func:`~sagacity.approvals.suspects.resolve_suspect` for the refusals.
        """
        lock, users = self._resolving.get(saga_id, (asyncio.Lock(), 0))
        self._resolving[saga_id] = (lock, users + 1)
        try:
            async with lock:
                return await resolve_suspect(
                    self._client,
                    saga_id,
                    call_seq,
                    resolver=resolver,
                    happened=happened,
                    result=result,
                    journal=self._journal,
                    rpc_timeout=self._rpc_timeout,
                    resolvers=self.resolvers,
                    signer=self.signer,
                    keyring=self.keyring,
                )
        finally:
            lock, users = self._resolving[saga_id]
            if users == 1:
                del self._resolving[saga_id]
            else:
                self._resolving[saga_id] = (lock, users - 1)

    async def sign(
        self,
        saga_id: str,
        journal_seq: int,
        *,
        approver: str,
        approve: bool,
        reason: str | None = None,
        message: str | None = None,
        args: dict[str, Any] | None = None,
    ) -> tuple[Decision, PendingApproval]:
        """The ``decide`` payload for the request the saga waits with at ``journal_seq``,
        checked and signed as :meth:`approve` / :meth:`reject` send it, but not sent (another
        client, such as the plain ``temporal`` CLI, delivers it; :meth:`Decision.as_signal` is
        the ``approve`` / ``reject`` signal's); with the request as the saga holds it."""
        fields: dict[str, Any] = {} if reason is None else {"reason": reason}
        if message is not None:
            fields["message"] = message
        if args is not None:
            fields["args"] = args
        decision = _decision(journal_seq=journal_seq, approver=approver, approve=approve, **fields)
        return await self._prepare(saga_id, decision)

    async def _prepare(self, saga_id: str, decision: Decision) -> tuple[Decision, PendingApproval]:
        """``decision`` checked against what the saga waits for and signed; the request too."""
        if not decision.approver.strip():
            raise ApprovalRefused("a decision must name its approver")
        live = await self._live(saga_id)
        if live.workflow_status == "not_found":
            raise ApprovalNotFound(f"no saga {saga_id!r}")
        if live.status is None:
            if live.workflow_status == "no_answer":
                raise SagaUnavailable(f"saga {saga_id!r} did not answer: {live.detail}")
            raise ApprovalConflict("not_waiting", f"saga {saga_id!r} has ended ({live.ended})")
        pending = self._check(saga_id, live.status, decision)
        return self._signed(saga_id, decision, pending), pending

    async def _decide(self, saga_id: str, decision: Decision) -> DecisionResult:
        decision, pending = await self._prepare(saga_id, decision)
        handle = self._client.get_workflow_handle(saga_id)
        try:
            outcome = await handle.execute_update("decide", decision, result_type=str)
        except WorkflowUpdateFailedError as err:
            if error_type(err) == SAGA_BUSY:  # for a moment; nothing recorded
                raise SagaUnavailable(f"saga {saga_id!r}: {err.cause}") from None
            raise _refused(saga_id, err.cause) from None
        except RPCError as err:
            if err.status is RPCStatusCode.NOT_FOUND:  # it ended since the check
                raise ApprovalConflict("not_waiting", f"saga {saga_id!r} has ended") from None
            raise SagaUnavailable(f"saga {saga_id!r}: {err.message}") from err
        return DecisionResult(
            saga_id=saga_id,
            journal_seq=decision.journal_seq,
            tool_name=pending.tool_name,
            decision="approved" if outcome.startswith("approved") else "rejected",
            # a co-approval that leaves the quorum short: "approved 1 of 2", the request open
            awaiting=outcome.removeprefix("approved ") if outcome.startswith("approved ") else None,
            approver=decision.approver,
            reason=None if decision.approve else decision.reason,
            message=decision.message,
            edited=decision.args is not None,
        )

    def _signed(self, saga_id: str, decision: Decision, pending: PendingApproval) -> Decision:
        """``decision`` signed over the input hash the saga waits with (unchanged without a
        signer); :class:`DecisionUnsigned` when the keyring would refuse it."""
        check_signer(self.signer, self.keyring, decision.approver)
        if self.signer is None:
            return decision
        statement = decision.statement(saga_id, pending.input_hash)
        return decision.model_copy(
            update={"input_hash": pending.input_hash, "signature": self.signer.sign(statement)}
        )

    def _check(self, saga_id: str, status: SagaStatus, decision: Decision) -> PendingApproval:
        """The request awaiting this decision, or the refusal the workflow would give."""
        seq = decision.journal_seq
        pending = status.pending_approval
        if pending is not None and pending.journal_seq == seq:
            if not allowed(self.approvers, decision.approver, pending.tool_name):
                raise ApproverNotAllowed(
                    f"{decision.approver!r} may not decide {pending.tool_name!r} calls"
                )
            if decision.input_hash is not None and decision.input_hash != pending.input_hash:
                raise ApprovalConflict(
                    "input_hash_mismatch",
                    f"input_hash does not match the call saga {saga_id!r} waits to run at seq {seq}",
                )
            return pending
        if any(r.seq == seq and r.phase is Phase.AWAITING_APPROVAL for r in status.rows):
            raise ApprovalConflict(
                "already_decided",
                f"the request at seq {seq} of saga {saga_id!r} is already decided",
            )
        if pending is not None:
            raise ApprovalConflict(
                "unknown_seq",
                f"no request awaits a decision at seq {seq} "
                f"(saga {saga_id!r} waits at seq {pending.journal_seq})",
            )
        raise ApprovalConflict(
            "not_waiting",
            f"saga {saga_id!r} is not waiting for an approval (state: {status.state.value})",
        )

    def _view(self, request: ApprovalRequest, live: Live) -> PendingRequest:
        return _view(request, live, self.deciders(request.tool_name))

    async def _live(self, saga_id: str) -> Live:
        return await live_status(self._client, saga_id, self._rpc_timeout)


def _decision(**fields: Any) -> Decision:
    """The ``decide`` payload; what the saga would refuse to read is refused here instead."""
    try:
        return Decision(**fields)
    except ValidationError as exc:
        raise invalid(exc, what="the decision") from None


#: the most requests one inbox page holds
MAX_PAGE = 500
#: an inbox cursor (:attr:`Inbox.next`): ``MICROSECONDS.SEQ.SAGA_ID``, the last request's time
#: (since 1970, UTC), journal seq and saga id, as a JSON Schema ``pattern`` (and Python's ``re``)
CURSOR_PATTERN = r"^(-?[0-9]{1,18})\.([0-9]{1,19})\.([^\x00-\x1f\x7f-\x9f]{0,1000})$"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_SEQ_MAX = 2**63 - 1


def inbox_filter(
    *,
    tools: Sequence[str] | None = None,
    saga_id: str | None = None,
    older_than_s: float | None = None,
    newer_than_s: float | None = None,
) -> InboxFilter:
    """The filter for requests to ``tools`` (any when empty), of ``saga_id``, that have waited
    at least ``older_than_s`` and at most ``newer_than_s`` seconds until now."""
    now = datetime.now(UTC)
    return InboxFilter(
        tool_names=tuple(tools or ()),
        saga_id=saga_id,
        requested_before=None if older_than_s is None else now - timedelta(seconds=older_than_s),
        requested_after=None if newer_than_s is None else now - timedelta(seconds=newer_than_s),
    )


def _encode_cursor(request: ApprovalRequest) -> str:
    at, saga_id, seq = request.cursor
    return f"{(at - _EPOCH) // timedelta(microseconds=1)}.{seq}.{saga_id}"


def _cursor(text: str | None) -> tuple[datetime, str, int] | None:
    """The position an :attr:`Inbox.next` names; :class:`InvalidInput` for anything else.

    Any text :data:`CURSOR_PATTERN` matches is a position: a time or seq past what the store
    holds stands for its end (nothing lies beyond it), so no such cursor is refused.
    """
    if text is None:
        return None
    found = re.fullmatch(CURSOR_PATTERN, text)
    if found is None:
        raise InvalidInput("after: not a cursor this inbox gave out (use the page's next)")
    micros, seq, saga_id = found.groups()
    try:
        when = _EPOCH + timedelta(microseconds=int(micros))
    except OverflowError:
        when = datetime.min if micros.startswith("-") else datetime.max
    return when.replace(tzinfo=UTC), saga_id, min(int(seq), _SEQ_MAX)


def _view(request: ApprovalRequest, live: Live, deciders: list[str] | None) -> PendingRequest:
    pending = live.status.pending_approval if live.status else None
    if pending is not None and pending.journal_seq != request.journal_seq:
        pending = None  # the saga waits, but for another request
    intact = request.input_hash == input_hash(request.input) and (
        pending is None or pending.input_hash == request.input_hash
    )
    deadline = request.expires_at
    if deadline is None and pending is not None:
        deadline = request.created_at + timedelta(seconds=pending.deadline_s)
    return PendingRequest(
        saga_id=request.saga_id,
        journal_seq=request.journal_seq,
        tool_name=request.tool_name,
        input=request.input,
        input_hash=request.input_hash,
        hidden=list(hidden_paths(request.input)),
        why=pending.why if pending is not None else None,
        requested_at=request.created_at,
        workflow_status=live.workflow_status,
        saga_state=live.status.state if live.status else None,
        waiting=pending is not None,
        deadline=deadline,
        deciders=deciders,
        intact=intact,
        escalation=_escalation(request, pending),
        approvals=RequestQuorum.model_validate(pending.quorum.model_dump())
        if pending is not None and pending.quorum is not None
        else None,
    )


def _escalation(
    request: ApprovalRequest, pending: PendingApproval | None
) -> RequestEscalation | None:
    """The request's escalation as its row records it, else as its waiting saga says."""
    if request.escalated_at is not None:
        return RequestEscalation(
            at=request.escalated_at,
            to=request.escalated_to or "",
            state=request.escalation_state or "pending",
            attempts=request.escalation_attempts,
            error=request.escalation_error,
        )
    told = pending.escalation if pending is not None else None
    if told is None:
        return None
    return RequestEscalation(at=told.at, to=told.to, state=told.outcome)


def _refused(saga_id: str, cause: BaseException) -> ApprovalRefused | InvalidInput:
    message = str(getattr(cause, "message", "") or cause)
    details = getattr(cause, "details", ()) or ()
    kind = str(details[0]) if details else None
    if kind in {"not_allowed", "not_in_group", "starter"}:
        return ApproverNotAllowed(message)
    if kind == "invalid_edit":
        return InvalidInput(f"saga {saga_id!r} refused the edited arguments: {message}")
    if kind in {"unsigned", "bad_signature"}:
        return DecisionUnsigned(f"saga {saga_id!r} refused the decision: {message}")
    if kind in {
        "already_decided",
        "already_approved",
        "not_waiting",
        "unknown_seq",
        "input_hash_mismatch",
    }:
        return ApprovalConflict(kind, f"saga {saga_id!r}: {message}")
    return ApprovalRefused(f"saga {saga_id!r} refused the decision: {message}")
