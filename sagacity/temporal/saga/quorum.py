"""Co-approvals: a request under a tool's ``ApprovalPolicy`` is approved once M distinct
principals of its group have approved it, and rejected by any one of them.

Only a saga whose recorded catalog holds a tool declared with ``approval_policy`` takes this
path (no recorded history has one): no patch is needed, the option decides and it is in history.
The co-approvals live in workflow state, rebuilt from the signals and updates history holds
when a worker replays; they are journaled with the one decision row at the request's seq + 1.
"""

from __future__ import annotations

from typing import Any, Literal

from sagacity.approval_policy import ApprovalPolicy
from sagacity.evidence.decisions import ANY_PRINCIPAL, payload_object, signed_row
from sagacity.journal.canonical import to_json
from sagacity.temporal.models import Approve, PendingApproval, QuorumStatus, Reject
from sagacity.temporal.saga.core import SagaCore

#: why a co-approval does not count
QuorumRefusal = Literal["already_approved", "not_in_group", "starter", "invalid_edit"]


class Quorum:
    """The policy of the request open now and the co-approvals it has taken so far."""

    def __init__(self, core: SagaCore) -> None:
        self._core = core
        self.policy: ApprovalPolicy | None = None
        self.approvals: list[Approve] = []

    def open(self, policy: ApprovalPolicy | None) -> None:
        """A new request, under ``policy`` (None: one approval decides, as ever)."""
        self.policy, self.approvals = policy, []

    def status(self) -> QuorumStatus | None:
        """What ``status`` and the approvers' views show of the request's quorum."""
        policy = self.policy
        if policy is None:
            return None
        return QuorumStatus(
            required=policy.required,
            group=policy.group,
            approved_by=[a.approver for a in self.approvals],
            started_by=self._core.options.started_by,
            starter_may_approve=policy.starter_may_approve,
        )

    def refusal(self, decision: Approve | Reject) -> tuple[QuorumRefusal, str] | None:
        """Why ``decision`` (its signature already verified) cannot count toward the quorum."""
        policy = self.policy
        if policy is None or not isinstance(decision, Approve):
            return None  # a rejection by anyone who may decide ends the request
        who = decision.approver
        if decision.args is not None:
            # co-approvers would each vouch for other arguments: one edit cannot be M people's
            return (
                "invalid_edit",
                f"a request that needs {policy.required} approvals cannot be approved with "
                "changes: approve it as proposed, or reject it with a message",
            )
        if any(a.approver == who for a in self.approvals):
            return "already_approved", f"{who!r} already approved this request"
        keyring = self._core.keyring
        # without a keyring (unsigned decisions, dev only) the groups are unknown: the group
        # is not enforced, distinct principals and the starter still are
        if policy.group and keyring is not None:
            members = keyring.groups.get(policy.group)
            if members is None:
                return "not_in_group", f"the keyring has no group {policy.group!r}"
            if who not in members:
                return "not_in_group", f"{who!r} is not in the group {policy.group!r}"
        if not policy.starter_may_approve and who == self._core.options.started_by:
            return "starter", f"{who!r} started this saga, and may not approve its calls"
        key = decision.signature.key_id if decision.signature is not None else None
        entry = keyring.find(key) if keyring is not None and key is not None else None
        if (
            entry is not None
            and ANY_PRINCIPAL not in entry.principals
            and any(a.signature is not None and a.signature.key_id == key for a in self.approvals)
        ):
            # one person's key is one pair of eyes, whatever principals it names; a service
            # key ("*") vouches for whom it authenticated, so it may sign for several
            return "already_approved", f"key {key} ({entry.name}) already signed an approval"
        return None

    def partial(self, decision: Approve | Reject, pending: PendingApproval | None) -> bool:
        """Take ``decision`` as a co-approval; True while the quorum still lacks approvals
        (the request stays open), False when it decides (a rejection, the last approval)."""
        policy = self.policy
        if policy is None or not isinstance(decision, Approve):
            return False
        self.approvals.append(decision)
        if pending is not None:
            pending.quorum = self.status()
        return len(self.approvals) < policy.required

    @property
    def progress(self) -> str:
        """The ``decide`` update's answer to a co-approval that does not decide yet."""
        return f"approved {len(self.approvals)} of {self.policy.required if self.policy else 1}"

    def onto(self, payload: str, pending: PendingApproval | None) -> str:
        """A decision row's payload with every co-approval's signed fields and ``required``
        (unchanged without a policy). A rejection's row lists those received before it."""
        policy = self.policy
        if policy is None or pending is None:
            return payload
        body = payload_object(payload) or {"by": payload.removeprefix("approver=")}
        approvals = [self._signed(a, pending) for a in self.approvals]
        return to_json({**body, "approvals": approvals, "required": policy.required})

    def _signed(self, approval: Approve, pending: PendingApproval) -> dict[str, Any]:
        """One co-approval as the row holds it: its statement's fields and its signature."""
        keyring, signature = self._core.keyring, approval.signature
        if keyring is None or signature is None:
            return {"by": approval.approver, "decision": "approve"}
        entry = keyring.find(signature.key_id)
        statement = approval.statement(self._core.saga_id, pending.input_hash)
        return payload_object(signed_row(statement, signature, entry.name if entry else "")) or {}
