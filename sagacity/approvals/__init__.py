"""Human decisions: approve gated calls, resolve SUSPECT ones, from code, CLI or HTTP.

The gate itself lives in the saga engine (:mod:`sagacity.temporal.saga.gate`); this package sits on it.
"""

from sagacity.approvals.service import (
    ApprovalService,
    DecisionResult,
    Inbox,
    InboxFilter,
    PendingRequest,
    inbox_filter,
)
from sagacity.approvals.suspects import Resolution, SagaView, SuspectView, resolve_suspect

__all__ = [
    "ApprovalService",
    "DecisionResult",
    "Inbox",
    "InboxFilter",
    "PendingRequest",
    "Resolution",
    "SagaView",
    "SuspectView",
    "inbox_filter",
    "resolve_suspect",
]
