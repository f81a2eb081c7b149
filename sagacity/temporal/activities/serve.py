"""The activities one worker serves: its parts, composed under their Temporal names."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Keyring, Policy
from sagacity.evidence.redaction import Redactor
from sagacity.store.approvals import ApprovalStore
from sagacity.store.halts import HaltStore
from sagacity.store.journal import JournalStore
from sagacity.temporal.activities.approvals import Approvals
from sagacity.temporal.activities.calls import Calls
from sagacity.temporal.activities.compensation import Compensation
from sagacity.temporal.activities.escalation import Escalations, EscalationTarget
from sagacity.temporal.activities.state import DEFAULT_OUTAGE_WINDOW, ActivityState
from sagacity.temporal.activities.tools import ToolActivities
from sagacity.temporal.activities.writes import JournalWrites
from sagacity.tools import ToolRegistry

__all__ = ["SagaActivities"]


class SagaActivities:
    """The activities one worker serves, bound to its journal, approval store and tools."""

    def __init__(
        self,
        journal: JournalStore,
        approvals: ApprovalStore,
        tools: ToolRegistry,
        *,
        redactor: Redactor | None = None,
        checkpoints: CheckpointWriter | None = None,
        outage_window: timedelta = DEFAULT_OUTAGE_WINDOW,
        keyring: Keyring | None = None,
        policy: Policy | None = None,
        escalation: EscalationTarget | None = None,
    ) -> None:
        self.state = ActivityState(
            journal=journal,
            approvals=approvals,
            tools=tools,
            redactor=redactor or Redactor(),
            checkpoints=checkpoints,
            outage_window=outage_window,
            keyring=keyring,
            policy=policy or Policy(),
            halts=HaltStore(journal.pool),
        )
        #: the namespaces whose sagas show their state in search attributes (registered there)
        self.visible_in = self.state.visible_in
        catalog = ToolActivities(self.state)
        writes = JournalWrites(self.state)
        approving = Approvals(self.state, writes)
        calls = Calls(self.state, writes, approving)
        undo = Compensation(self.state, writes)
        # each activity is its part's, under the Temporal name the part gives it
        self.describe_tools = catalog.describe_tools
        self.validate_steps = catalog.validate_steps
        self.open_saga = writes.open_saga
        self.append = writes.append
        self.seal_saga = writes.seal_saga
        self.read_halt = writes.read_halt
        self.open_approval = approving.open_approval
        self.close_approval = approving.close_approval
        self.check_edit = approving.check_edit
        self.call_tool = calls.call_tool
        self.open_and_call = calls.open_and_call
        self.resolve_call = calls.resolve_call
        self.compensate = undo.compensate
        self.escalate_approval = Escalations(self.state, escalation).escalate_approval

    def all(self) -> list[Callable[..., Awaitable[Any]]]:
        return [
            self.describe_tools,
            self.open_saga,
            self.call_tool,
            self.open_and_call,
            self.compensate,
            self.append,
            self.open_approval,
            self.close_approval,
            self.check_edit,
            self.resolve_call,
            self.seal_saga,
            self.validate_steps,
            self.read_halt,
            self.escalate_approval,
        ]
