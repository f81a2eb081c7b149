"""Data that crosses Temporal: workflow inputs and results, activity requests, signals, queries.

Code outside this package imports every name from here. The modules hold them by what they
are for: ``options`` (starting a saga), ``steps`` (a declarative saga's, and their check),
``journal`` (rows and heads), ``calls``, ``effects`` (and their compensation), ``approvals``,
``decisions`` (what humans send), ``halts``, ``carry`` (continue-as-new), ``status`` (what a
saga shows), on ``state`` and ``lean``. They
are payloads recorded in workflow histories: their fields and defaults are a wire format
(``docs/versioning.md``).
"""

from sagacity.temporal.models.approvals import (
    ApprovalClose,
    ApprovalOpen,
    ApprovalOpened,
    EditCheck,
    EditChecked,
    Escalate,
    Escalated,
    Escalation,
    EscalationOutcome,
    PendingApproval,
    QuorumStatus,
)
from sagacity.temporal.models.calls import (
    CallOutcome,
    CallRequest,
    CallStatus,
    ErrorInfo,
    Journaled,
    Rejection,
    Resolved,
    ResolveRequest,
    Suspect,
    failure_payload,
    rejection_of,
)
from sagacity.temporal.models.carry import (
    SagaCarry,
    SagaProgress,
)
from sagacity.temporal.models.decisions import (
    Abort,
    Approve,
    Decision,
    DecisionKind,
    Identity,
    InputHash,
    Reason,
    Reject,
    RejectMessage,
    Resolve,
    approval_statement,
    edited_hash,
    resolution_statement,
)
from sagacity.temporal.models.effects import (
    CompensateRequest,
    Compensating,
    Effect,
    EffectRefs,
    Original,
    undo_attempt,
    undo_attempt_detail,
)
from sagacity.temporal.models.halts import (
    MAX_HALT_SCOPE_CHARS,
    HaltLookedUp,
    HaltLookup,
    HaltNotice,
    Resume,
)
from sagacity.temporal.models.journal import (
    AppendRequest,
    Head,
    JournalRow,
    RowDraft,
    RowRef,
    SagaOpen,
    SagaOpened,
    SealRequest,
    ToolSpec,
)
from sagacity.temporal.models.lean import (
    Lean,
)
from sagacity.temporal.models.options import (
    ENGINE_VERSION,
    SagaOptions,
    SagaSpec,
)
from sagacity.temporal.models.state import (
    TERMINAL_STATES,
    SagaState,
)
from sagacity.temporal.models.status import (
    RESULT_EFFECTS,
    STATUS_ROWS,
    SagaResult,
    SagaStatus,
)
from sagacity.temporal.models.steps import (
    Step,
    StepsCheck,
    StepsChecked,
)

__all__ = [
    "ENGINE_VERSION",
    "MAX_HALT_SCOPE_CHARS",
    "RESULT_EFFECTS",
    "STATUS_ROWS",
    "TERMINAL_STATES",
    "Abort",
    "AppendRequest",
    "ApprovalClose",
    "ApprovalOpen",
    "ApprovalOpened",
    "Approve",
    "CallOutcome",
    "CallRequest",
    "CallStatus",
    "CompensateRequest",
    "Compensating",
    "Decision",
    "DecisionKind",
    "EditCheck",
    "EditChecked",
    "Effect",
    "EffectRefs",
    "ErrorInfo",
    "Escalate",
    "Escalated",
    "Escalation",
    "EscalationOutcome",
    "HaltLookedUp",
    "HaltLookup",
    "HaltNotice",
    "Head",
    "Identity",
    "InputHash",
    "JournalRow",
    "Journaled",
    "Lean",
    "Original",
    "PendingApproval",
    "QuorumStatus",
    "Reason",
    "Reject",
    "RejectMessage",
    "Rejection",
    "Resolve",
    "ResolveRequest",
    "Resolved",
    "Resume",
    "RowDraft",
    "RowRef",
    "SagaCarry",
    "SagaOpen",
    "SagaOpened",
    "SagaOptions",
    "SagaProgress",
    "SagaResult",
    "SagaSpec",
    "SagaState",
    "SagaStatus",
    "SealRequest",
    "Step",
    "StepsCheck",
    "StepsChecked",
    "Suspect",
    "ToolSpec",
    "approval_statement",
    "edited_hash",
    "failure_payload",
    "rejection_of",
    "resolution_statement",
    "undo_attempt",
    "undo_attempt_detail",
]
