"""The approval gate: a call that needs approval waits for a human's decision, judged first.

Decisions come as ``approve`` / ``reject`` signals or a ``decide`` update; a decision that cannot
be taken (wrong seq, hash, approver, signature) is refused and recorded, never raised in a
signal handler. An abort during the wait rejects the call.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any, Literal, NoReturn

from temporalio import workflow
from temporalio.common import RawValue
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.errors import ApprovalRejected, ToolFailed
from sagacity.evidence.decisions import Statement, allowed, signed_row
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import APPROVAL_GATE, Phase
from sagacity.rules import ApprovalRule
from sagacity.temporal import decode, names
from sagacity.temporal.failures import error_message, error_type
from sagacity.temporal.models import (
    ApprovalOpen,
    ApprovalOpened,
    Approve,
    Decision,
    ErrorInfo,
    PendingApproval,
    Reject,
    Rejection,
    RowDraft,
    SagaCarry,
    SagaState,
    ToolSpec,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.edits import Edits, edited_fields, unsigned_approval
from sagacity.temporal.saga.escalation import Escalations, approval_sla_s, with_escalation
from sagacity.temporal.saga.journal import Journal
from sagacity.temporal.saga.patches import ABORT_ROW_PATCH, BOUND_ROWS_PATCH, DECIDE_RECORDED_PATCH
from sagacity.temporal.saga.quorum import Quorum
from sagacity.temporal.saga.signals import Refusals, hinted, sender, validated

#: why a decision was refused, as an update caller finds it in the error's first detail
RefusalKind = Literal[
    "no_approver",
    "already_decided",
    "not_waiting",
    "unknown_seq",
    "input_hash_mismatch",
    "not_allowed",
    "unsigned",
    "bad_signature",
    "invalid",
    "invalid_edit",
    "already_approved",
    "not_in_group",
    "starter",
]


class Gate:
    """The approval request open now, the decision taken on it, and the requests decided."""

    def __init__(
        self,
        core: SagaCore,
        refusals: Refusals,
        controls: Controls,
        journal: Journal,
        carry: SagaCarry | None,
    ) -> None:
        self._core = core
        self._refusals = refusals
        self._controls = controls
        self._journal = journal
        self._escalations = Escalations(core, controls)
        self.pending: PendingApproval | None = None
        self._decision: Approve | Reject | None = None
        #: the approval the next call runs under: its approver and signature go to the worker
        self.approval: Approve | None = None
        #: the seq of the approval request being opened, and decisions that arrived meanwhile
        self._opening: int | None = None
        self._early_decisions: list[tuple[Approve | Reject, str | None]] = []
        self.decided: set[int] = set(carry.decided) if carry else set()
        #: the hashes of the input the approver confirmed, raw and as the request shows it
        self.approved_input_hash: str | None = None
        self.approved_request_hash: str | None = None
        #: an approval's edited arguments, checked before it is journaled
        self.edits = Edits(core, journal)
        #: the co-approvals of a request whose tool declares an approval policy
        self.quorum = Quorum(core)

    async def await_approval(
        self, spec: ToolSpec, input_json: str, rule: ApprovalRule | None = None
    ) -> int:
        """Journal AWAITING_APPROVAL, wait for a decision or the deadline; return the request seq.

        ``rule``: the tool's ``needs_approval`` rule that asked (its request row says why).
        """
        core, controls = self._core, self._controls
        seq = core.head.seq + 1
        self._decision = self.approval = None
        self._opening = seq
        self.quorum.open(spec.approval_policy)
        try:
            opened: ApprovalOpened = await self._journal.activity(
                names.OPEN_APPROVAL,
                ApprovalOpen(
                    saga_id=core.saga_id,
                    seq=seq,
                    prev_hash=core.head.hash,
                    tool_name=spec.name,
                    input_json=input_json,
                    deadline_s=core.options.approval_deadline_s,
                    rule=rule,
                    policy=spec.approval_policy,
                    started_by=core.options.started_by if spec.approval_policy else None,
                ),
                ApprovalOpened,
            )
        except ActivityError as err:
            if error_type(err) != "ToolArgumentsInvalid":
                raise
            # the call cannot run, so no approver is asked: nothing was journaled for it
            error = ErrorInfo(type=error_type(err), message=error_message(err))
            core.failures.append(error)
            raise ToolFailed(spec.name, error.type, error.message, ran=False) from None
        finally:
            self._opening = None
        core.track(opened.rows)
        self.approved_input_hash = opened.raw_input_hash
        self.approved_request_hash = opened.input_hash
        # approvers see the request as stored (secrets redacted); its hash is what they confirm
        self.pending = waiting = PendingApproval(
            journal_seq=seq,
            tool_name=spec.name,
            input_json=opened.input,
            input_hash=opened.input_hash,
            deadline_s=core.options.approval_deadline_s,
            hidden=opened.hidden,
            why=opened.why,
            quorum=self.quorum.status(),
        )
        # decisions that came with the request's opening, in the same activation (signals are
        # applied first when a worker replays history): judged now that the request is known
        early, self._early_decisions = self._early_decisions, []
        for sent, given_hash in early:
            self._take(sent, given_hash)
        core.enter(SagaState.AWAITING_APPROVAL, spec.name)
        try:
            await self._wait(spec, waiting)
        except TimeoutError:
            self._decision = Reject(journal_seq=seq, approver="sagacity", reason="timeout")
        decision = self._decision
        escalation = waiting.escalation
        if decision is None or controls.abort is not None:
            # an abort (or cancel) wins over a decision taken in the same moment
            decision = Reject(
                journal_seq=seq,
                approver=(controls.abort.by if controls.abort else None) or "sagacity",
                reason=f"aborted: {controls.abort.reason if controls.abort else ''}",
            )
        self.decided.add(seq)
        pending, self.pending = self.pending, None
        core.enter(SagaState.RUNNING)
        # the decision row repeats the request's input as journaled, which its hash names
        bound = workflow.patched(BOUND_ROWS_PATCH)
        request = {"input": "", "input_of": seq} if bound else {"input": input_json}
        if isinstance(decision, Approve):
            edit = self.edits.checked if decision.args is not None else None
            approved: dict[str, Any] = request
            if edit is not None:
                # the row holds the approved input (redacted as its INTENT will be); the
                # request's row before it keeps the proposed one
                approved = {"input": edit.input}
                self.approved_input_hash = edit.raw_input_hash
            await self._journal.append(
                [
                    RowDraft(
                        tool_name=APPROVAL_GATE,
                        phase=Phase.APPROVED,
                        payload=with_escalation(
                            self.quorum.onto(
                                self._decision_payload(decision, pending)
                                or unsigned_approval(decision, edit),
                                pending,
                            ),
                            escalation,
                        ),
                        **approved,
                    )
                ]
            )
            if controls.abort is None:
                self.approval = decision
                return seq
            # aborted while the approval was being journaled: the approved call never starts
            # (this row is not the decision: the escalation is on the APPROVED row already)
            escalation = None
            decision = Reject(
                journal_seq=seq,
                approver=controls.abort.by or "sagacity",
                reason=f"aborted before the approved call ran: {controls.abort.reason}",
            )
        payload = self._decision_payload(decision, pending) or _rejected_row(decision)
        if controls.abort is not None and workflow.patched(ABORT_ROW_PATCH):
            payload = controls.abort_row(controls.abort, decision.reason, signed=bound)
        payload = with_escalation(self.quorum.onto(payload, pending), escalation)
        await self._journal.append(
            [RowDraft(tool_name=APPROVAL_GATE, phase=Phase.REJECTED, payload=payload, **request)]
        )
        await self._journal.close_request(seq)
        rejection = Rejection(
            tool=spec.name, by=decision.approver, reason=decision.reason, message=decision.message
        )
        error = ErrorInfo(
            type="ApprovalRejected",
            message=f"{spec.name}: {decision.reason}",
            rejection=rejection,
        )
        core.failures.append(error)
        if controls.abort is not None:
            controls.raise_if_aborted()
        raise ApprovalRejected(
            f"{spec.name} rejected by {decision.approver}: {decision.reason}",
            **rejection.model_dump(),
        )

    async def _wait(self, spec: ToolSpec, pending: PendingApproval) -> None:
        """Wait for a decision, an abort or the deadline (``TimeoutError``), escalating past the
        request's SLA when the tool or the saga declares one. An edited approval is taken only
        once its arguments pass the tool's check: else it is refused, and the request stays
        open until the same deadline."""
        controls, options = self._controls, self._core.options

        def decided() -> bool:
            return self._decision is not None or controls.abort is not None

        sla_s = approval_sla_s(spec, options.approval_sla_s)
        started = workflow.now()
        until = started + timedelta(seconds=options.approval_deadline_s)
        try:
            while True:
                if sla_s is None:
                    # no SLA (every history recorded before escalation existed): the one timer
                    # as ever, re-armed for what is left of it after a refused edit
                    left = max(until - workflow.now(), timedelta(milliseconds=1))
                    await controls.wait(decided, timeout=left)
                else:
                    await self._escalations.wait(pending, decided, sla_s, started)
                decision = self._decision
                if (
                    not isinstance(decision, Approve)
                    or decision.args is None
                    or controls.abort is not None
                ):
                    return
                if await self.edits.judged(spec.name, decision, pending.input_json, self._refusals):
                    return
                self._decision = None
        finally:
            # an edit that is refused is no decision: the escalation goes on across its check
            # (the cancel is issued in the same activation as before for every other decision)
            self._escalations.stop()

    def _statement(self, decision: Approve | Reject, pending: PendingApproval) -> Statement:
        """What a signature on ``decision`` must vouch for: this saga, the request, its hash
        (a rejection's reason and message, an edited approval's arguments by their hash)."""
        return decision.statement(self._core.saga_id, pending.input_hash)

    def _decision_payload(
        self, decision: Approve | Reject, pending: PendingApproval | None
    ) -> str | None:
        """A signed decision's row payload (statement and signature); None for an unsigned one."""
        keyring = self._core.keyring
        if decision.signature is None or pending is None or keyring is None:
            return None
        signer = keyring.find(decision.signature.key_id)
        name = signer.name if signer is not None else ""
        statement = self._statement(decision, pending)
        extra = edited_fields(statement.result) if statement.decision == "approve_edited" else {}
        return signed_row(statement, decision.signature, name, **extra)

    def _refusal(
        self, decision: Approve | Reject, given_hash: str | None
    ) -> tuple[RefusalKind, str] | None:
        """Why a decision cannot be taken (a stable kind and a sentence), or None when it can."""
        pending = self.pending
        journal_seq, approver = decision.journal_seq, decision.approver
        if not approver.strip():
            return "no_approver", "a decision must name its approver"
        if self.edits.checking and pending is not None and pending.journal_seq == journal_seq:
            return (
                "already_decided",
                f"an edited approval of the request at seq {journal_seq} is being checked; "
                "if its arguments are refused, decide again",
            )
        if journal_seq in self.decided or (
            pending is not None
            and pending.journal_seq == journal_seq
            and self._decision is not None
        ):
            return "already_decided", f"the request at seq {journal_seq} is already decided"
        if pending is None:
            return "not_waiting", "the saga is not waiting for an approval"
        if pending.journal_seq != journal_seq:
            return (
                "unknown_seq",
                f"no request awaits a decision at seq {journal_seq} "
                f"(waiting: {pending.journal_seq})",
            )
        if given_hash is not None and given_hash != pending.input_hash:
            return "input_hash_mismatch", "input_hash does not match the request awaiting approval"
        tool = pending.tool_name
        if not (
            allowed(self._core.options.approvers, approver, tool)
            and allowed(self._core.policy.approvers, approver, tool)
        ):
            return "not_allowed", f"{approver!r} may not approve {tool!r}"
        keyring = self._core.keyring
        if keyring is not None:
            why = keyring.refusal(self._statement(decision, pending), decision.signature)
            if why is not None:
                return ("unsigned" if decision.signature is None else "bad_signature"), why
        return self.quorum.refusal(decision)

    def _take(self, decision: Approve | Reject, given_hash: str | None) -> None:
        if self.pending is None and self._opening == decision.journal_seq:
            self._early_decisions.append((decision, given_hash))
            return
        refusal = self._refusal(decision, given_hash)
        if refusal is not None:
            self._refusals.refuse(decision.approver, refusal[1])
            return
        if not self.quorum.partial(decision, self.pending):
            self._decision = decision

    # -- the handlers: signals approve and reject, update decide ----------------------------

    def on_approve(self, *payloads: Any) -> None:
        decision = self._refusals.parse("approve", Approve, payloads)
        if decision is not None:
            self._take(decision, decision.input_hash)

    def on_reject(self, *payloads: Any) -> None:
        decision = self._refusals.parse("reject", Reject, payloads)
        if decision is not None:
            self._take(decision, decision.input_hash)

    @hinted
    def validate_update(self, name: str, args: Sequence[RawValue]) -> None:
        # a decision is judged in the handler, where its refusal is recorded (a validator's
        # rejection leaves no trace in history); an update of no known name is rejected here
        if name != "decide":
            raise ApplicationError(
                f"this saga has no update {name[:100]!r} (it takes 'decide')",
                type="UnknownUpdate",
                non_retryable=True,
            )
        self._controls.refuse_if_busy("decision")

    @hinted
    async def on_update(self, name: str, args: Sequence[RawValue]) -> str:
        # Temporal reads this method's annotations (Sequence[RawValue]: the payloads come raw),
        # so both names are imported at run time
        if not workflow.patched(DECIDE_RECORDED_PATCH):
            # before the marker the validator judged the decision (a refusal left no trace in
            # history): a decide update recorded then was taken
            return await self._on_decide(self._read_decision(args))
        decision = self._read_decision(args)
        refusal = self._refusal(decision.as_signal(), decision.input_hash)
        if refusal is not None:
            self._refuse_update(decision.approver, *refusal)
        return await self._on_decide(decision)

    def _read_decision(self, args: Sequence[RawValue]) -> Decision:
        """The update's one payload as a :class:`Decision`; else refused, recorded and raised."""
        payloads = decode.read(args)
        if isinstance(payloads, decode.Unreadable):
            self._refuse_update("?", "invalid", f"malformed decision: {payloads.why}")
        decision = validated(Decision, tuple(payloads))
        if isinstance(decision, str):
            why = f"malformed decision: {decision}"[:1000]
            self._refuse_update(sender(tuple(payloads)), "invalid", why)
        return decision

    def _refuse_update(self, who: str, kind: RefusalKind, why: str) -> NoReturn:
        """Record a refused decision, and tell the update's caller: typed, not to be retried."""
        self._refusals.refuse(who, why)
        raise ApplicationError(
            decode.encodable(why), kind, type="ApprovalRefused", non_retryable=True
        )

    async def _on_decide(self, decision: Decision) -> str:
        sent = decision.as_signal()
        if self.quorum.partial(sent, self.pending):
            return self.quorum.progress  # "approved 1 of 2": the request stays open
        self._decision = sent
        seq = decision.journal_seq
        core = self._core
        if isinstance(sent, Approve) and sent.args is not None:
            await self.edits.verdict(sent, lambda: core.head.seq > seq)
        else:
            await workflow.wait_condition(lambda: core.head.seq > seq)
        # what was journaled: an abort in the same moment turns an approval into REJECTED
        written = next((r for r in core.rows if r.seq == seq + 1), None)
        approved = written.phase is Phase.APPROVED if written else decision.approve
        return "approved" if approved else "rejected"


def _rejected_row(decision: Reject) -> str:
    """An unsigned REJECTED row's payload: who, why, and the message when there is one (rows
    without one are as they always were)."""
    # no patch: a message arrives only in a decision that carries one, which no recorded
    # history holds; the commands are the same either way (only the row's payload differs)
    row = {"by": decision.approver, "reason": decision.reason}
    if decision.message is not None:
        row["message"] = decision.message
    return to_json(row)
