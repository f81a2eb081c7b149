"""Postgres storage: the journal table, approval requests, migrations and grants.

The only package that speaks SQL; database errors leave it as :mod:`sagacity.errors` types.
"""

from sagacity.store.approvals import ApprovalRequest, ApprovalStore, input_hash
from sagacity.store.db import Pool, open_pool
from sagacity.store.journal import JournalStore, SagaSummary
from sagacity.store.migrate import apply_grants, migrate

__all__ = [
    "ApprovalRequest",
    "ApprovalStore",
    "JournalStore",
    "Pool",
    "SagaSummary",
    "apply_grants",
    "input_hash",
    "migrate",
    "open_pool",
]
