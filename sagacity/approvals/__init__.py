"""Approval surfaces: list pending IRREVERSIBLE calls and decide them, from code, CLI or HTTP.

The gate itself lives in the saga engine (:mod:`sagacity.temporal.saga`); this package sits on it.
"""

from sagacity.approvals.service import ApprovalService, DecisionResult, PendingRequest

__all__ = ["ApprovalService", "DecisionResult", "PendingRequest"]
