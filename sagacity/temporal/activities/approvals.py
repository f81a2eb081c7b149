"""Approvals as activities see them: open and close a request, verify an approval before its call
runs, and check a human's signed resolution."""

from __future__ import annotations

import dataclasses
import functools
import json
from datetime import timedelta

from temporalio import activity

from sagacity.errors import ToolArgumentsInvalid
from sagacity.evidence.decisions import allowed, payload_object, signed_row
from sagacity.evidence.redaction import hidden_paths
from sagacity.journal import Entry, Phase, input_hash, to_json
from sagacity.journal.results import marker_paths
from sagacity.rules import request_reason
from sagacity.store.approvals import ApprovalRequest
from sagacity.temporal.activities.outcomes import ref
from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.activities.tools import bound
from sagacity.temporal.activities.typed import typed
from sagacity.temporal.activities.writes import JournalWrites
from sagacity.temporal.models import (
    ApprovalClose,
    ApprovalOpen,
    ApprovalOpened,
    CallOutcome,
    CallRequest,
    CallStatus,
    EditCheck,
    EditChecked,
    ErrorInfo,
    Resolve,
    ResolveRequest,
    RowDraft,
    approval_statement,
    resolution_statement,
)
from sagacity.temporal.names import (
    CHECK_EDIT,
    CLOSE_APPROVAL,
    OPEN_APPROVAL,
    VERIFICATION_REFUSED,
)

__all__ = ["Approvals"]


class Approvals:
    """Approval requests and the checks a decision or a resolution must pass on this worker:
    its policy, and with a keyring a signature by a key allowed to sign for the human."""

    def __init__(self, state: ActivityState, writes: JournalWrites) -> None:
        self.state = state
        self.writes = writes

    @activity.defn(name=OPEN_APPROVAL)
    @typed
    async def open_approval(self, req: ApprovalOpen) -> ApprovalOpened:
        # an approver is never asked about a call that cannot run: refused before the request
        bound(self.state, req.tool_name, json.loads(req.input_json) if req.input_json else {})
        draft = self.state.draft(
            req.saga_id, req.tool_name, Phase.AWAITING_APPROVAL, req.input_json
        )
        why = None
        if req.rule is not None:
            # a rule's request says which rule asked and why, its sentence showing no value the
            # journal redacts; an IRREVERSIBLE tool's request keeps its empty payload
            why = request_reason(req.rule, req.input_json, hidden_paths(draft.input))
            payload = to_json({"rule": req.rule.label, "why": why, "condition": req.rule.wire()})
            draft = dataclasses.replace(draft, payload=payload)
        if req.policy is not None:
            # the policy the decision must meet, and who may not approve under it, go in the
            # hash-chained request so the verifier can check the decision offline (starter
            # null: not said, so no approval was refused as the starter's)
            body = payload_object(draft.payload) or {}
            recorded = {**body, "policy": req.policy.wire(), "started_by": req.started_by}
            draft = dataclasses.replace(draft, payload=to_json(recorded))
        entry = await self.writes.append_at(draft, seq=req.seq, prev_hash=req.prev_hash)
        await self.writes.at_tail(entry)
        # the request holds the input as journaled (redacted), so what an approver is shown,
        # what the hash covers and what the chain covers are one text. A redacted field is a
        # keyed fingerprint there, so the hash binds its value (no one can find it by trying
        # values without the key); the workflow holds the unredacted input's hash besides
        # (raw_input_hash), which binds fields a rule removes
        request = ApprovalRequest(
            saga_id=req.saga_id,
            journal_seq=req.seq,
            tool_name=req.tool_name,
            input=entry.input,
            input_hash=input_hash(entry.input),
            created_at=entry.timestamp,
            expires_at=None
            if req.deadline_s is None
            else entry.timestamp + timedelta(seconds=req.deadline_s),
        )
        await self.state.outlast(lambda: self.state.approvals.put(request))
        return ApprovalOpened(
            rows=[ref(entry)],
            input=request.input,
            input_hash=request.input_hash,
            raw_input_hash=input_hash(req.input_json),
            hidden=list(hidden_paths(request.input)),
            why=why,
        )

    @activity.defn(name=CHECK_EDIT)
    @typed
    async def check_edit(self, req: EditCheck) -> EditChecked:
        """Edited arguments checked as a call's are before its INTENT (the tool's signature),
        and redacted as its INTENT will hold them; ``ToolArgumentsInvalid`` when they do not fit.
        Nothing is journaled: the approval is written only once they pass."""
        hidden = marker_paths(req.args)
        if hidden:
            # the request showed a secret as its fingerprint; sent back, the tool would get
            # the fingerprint in place of the value
            raise ToolArgumentsInvalid(
                f"arguments for tool {req.tool_name!r} hold redaction markers at "
                f"{', '.join(hidden[:5])}: give the real values"
            )
        bound(self.state, req.tool_name, req.args)
        text = to_json(req.args)
        journaled = self.state.draft(req.saga_id, req.tool_name, Phase.INTENT, text).input
        return EditChecked(input=journaled, raw_input_hash=input_hash(text))

    @activity.defn(name=CLOSE_APPROVAL)
    @typed
    async def close_approval(self, req: ApprovalClose) -> bool:
        deleted: bool = await self.state.outlast(
            lambda: self.state.approvals.delete(req.saga_id, req.journal_seq)
        )
        return deleted

    async def verify(self, req: CallRequest) -> CallOutcome | None:
        """The REJECTED outcome of a call whose approval does not hold, written in place of its
        INTENT; None when it holds."""
        assert req.approval_seq is not None
        approval_seq = req.approval_seq
        stored = await self.state.outlast(
            lambda: self.state.approvals.get(req.saga_id, approval_seq)
        )
        if req.approved_input_hash is not None:
            # the request must be intact, and the call about to run the one it was made for;
            # binding the unredacted input keeps a change of redaction rules from refusing it
            same_call = input_hash(req.input_json) == req.approved_input_hash
            intact = (
                stored is not None
                and stored.input_hash == input_hash(stored.input)
                and stored.input_hash == req.approved_request_hash
            )
        else:  # requested before the unredacted hash was recorded
            about_to_run = self.state.redactor.text(req.tool_name, req.input_json).value
            same_call = stored is not None and stored.input == about_to_run
            intact = stored is not None and stored.input_hash == input_hash(about_to_run)
        if stored is None:
            reason = "no approval request is stored for this call"
        elif not (same_call and intact):
            reason = "the input about to run does not match the approved request's hash"
        elif stored.tool_name != req.tool_name:
            reason = "the approved request names another tool"
        else:
            refused = self._decision_refused(req)
            if refused is None:
                return None
            reason = f"the approval does not hold: {refused}"
        rejected = self.state.draft(
            req.saga_id,
            req.tool_name,
            Phase.REJECTED,
            req.input_json,
            to_json({"reason": f"{VERIFICATION_REFUSED}: {reason}"}),
        )
        row = await self.writes.append_at(rejected, seq=req.seq, prev_hash=req.prev_hash)
        await self.consume(req)
        return CallOutcome(
            status=CallStatus.REFUSED,
            error=ErrorInfo(type="ApprovalRefused", message=f"{VERIFICATION_REFUSED}: {reason}"),
            rows=[ref(row)],
        )

    def _decision_refused(self, req: CallRequest) -> str | None:
        """Why the approval the call runs under does not hold here, whatever the workflow took:
        the policy, and with a keyring a signature by a key allowed to sign for the approver."""
        approver = req.approver or ""
        if not allowed(self.state.policy.approvers, approver, req.tool_name):
            return f"{approver!r} may not approve {req.tool_name!r}"
        if self.state.keyring is None:
            return None
        statement = approval_statement(
            req.saga_id,
            req.approval_seq or 0,
            req.approved_request_hash or "",
            approver,
            # an edit is signed over the arguments about to run, whose hash was checked above
            edited=req.approved_input_hash if req.edited else None,
        )
        return self.state.keyring.refusal(statement, req.approval_signature)

    async def consume(self, req: CallRequest) -> None:
        """Spend the approval a call ran under (none: nothing to do)."""
        # consumed once the call has its outcome, so a failure here can never turn a call that
        # did not run into a SUSPECT one; the verification ran before INTENT
        if req.approval_seq is not None:
            await self.state.outlast(
                functools.partial(self.state.approvals.delete, req.saga_id, req.approval_seq)
            )

    def signed_resolution(self, resolution: Resolve, intent_row: Entry, row: RowDraft) -> RowDraft:
        """``row`` with the resolution's signature, so the journal proves who resolved the call
        (``docs/decisions.md``); as it is without a keyring to name the signer by."""
        signature = resolution.signature
        body = payload_object(row.payload)
        if self.state.keyring is None or signature is None or body is None:
            return row
        entry = self.state.keyring.find(signature.key_id)
        statement = resolution_statement(intent_row.saga_id, intent_row.hash, resolution)
        payload = signed_row(statement, signature, entry.name if entry else "", **body)
        return row.model_copy(update={"payload": payload})

    def resolution_refused(self, req: ResolveRequest, intent_row: Entry) -> str | None:
        """Why a human's resolution may not be written: the policy, or (with a keyring) its
        signature over this very INTENT row."""
        resolution = req.resolution
        if resolution is None:
            return None
        if not allowed(self.state.policy.resolvers, resolution.resolver, intent_row.tool_name):
            return f"{resolution.resolver!r} may not resolve {intent_row.tool_name!r} calls"
        if self.state.keyring is None:
            return None
        statement = resolution_statement(req.saga_id, intent_row.hash, resolution)
        return self.state.keyring.refusal(statement, resolution.signature)
