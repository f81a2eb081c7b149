"""Postgres storage: the journal table, approval requests, migrations, grants and role checks.

The only package that speaks SQL; database errors leave it as :mod:`sagacity.errors` types.
"""

from sagacity.store.approvals import ApprovalRequest, ApprovalStore, input_hash
from sagacity.store.db import Pool, open_pool
from sagacity.store.journal import JournalStore, SagaSummary
from sagacity.store.migrate import apply_grants, migrate, provision
from sagacity.store.roles import JournalRights, journal_rights

__all__ = [
    "ApprovalRequest",
    "ApprovalStore",
    "JournalRights",
    "JournalStore",
    "Pool",
    "SagaSummary",
    "apply_grants",
    "input_hash",
    "journal_rights",
    "migrate",
    "open_pool",
    "provision",
]
