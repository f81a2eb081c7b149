"""Fixtures for ``sagacity saga`` tests: the approval tests' CLI runner and workers, the agent
tests' worker, and the signed-decision tests' keyring and worker process, shared by name."""

from __future__ import annotations

from tests.agents.conftest import agent_worker
from tests.approvals.conftest import (
    approvals,
    cli,
    journal,
    pool,
    shop,
    shop_session,
    start_order,
    worker,
)
from tests.approvals.test_signed import keys, signed_worker

__all__ = [
    "agent_worker",
    "approvals",
    "cli",
    "journal",
    "keys",
    "pool",
    "shop",
    "shop_session",
    "signed_worker",
    "start_order",
    "worker",
]
