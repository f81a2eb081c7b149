"""The journal as workflow code sees it: rows, heads, the requests that open, append and seal."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from sagacity.approval_policy import ApprovalPolicy
from sagacity.evidence.decisions import Keyring, Policy
from sagacity.journal.chain import GENESIS_HASH
from sagacity.journal.phases import Phase
from sagacity.rules import ApprovalRule
from sagacity.temporal.models.lean import Lean
from sagacity.temporal.models.state import SagaState
from sagacity.temporal.models.steps import Step
from sagacity.tools import Reversibility


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
    #: when a call waits for a human, judged on its arguments in workflow code (absent in
    #: older histories and for tools declared without ``needs_approval``)
    approval: ApprovalRule | None = None
    #: past this many seconds undecided, an approval request is escalated (None: never; absent
    #: from every catalog recorded before escalation existed, so their sagas wait as they did)
    approval_sla_s: float | None = None
    #: how many distinct approvers of which group a gated call needs (None: one, as ever; only
    #: a catalog of a tool declared with ``approval_policy`` holds one, so no recorded history
    #: changes: the option decides, no patch needed)
    approval_policy: ApprovalPolicy | None = None


class RowRef(Lean):
    """A journal row as the workflow tracks it (the full row lives in Postgres)."""

    seq: int
    tool_name: str
    phase: Phase
    hash: str
    #: the activity that wrote the row sealed it as the saga's end (said only when true)
    sealed: bool = False
    #: a COMPENSATED row's: what a COMPENSATABLE undo returned, as journaled (the correction's
    #: result; None when it returned nothing, or too much to carry)
    correction: Any = None


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
    #: a new declarative saga's steps, checked against the worker's tools first: any problem,
    #: and nothing is claimed (absent in older histories: they checked with a local activity)
    steps: list[Step] | None = None


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
    #: what is wrong with the ``steps`` asked to be checked; any, and nothing else is answered
    #: (the journal is not claimed)
    problems: list[str] = Field(default_factory=list)


class SealRequest(BaseModel):
    """A saga's end to seal: its final head and the terminal state it ended in."""

    saga_id: str
    head: Head
    state: SagaState
