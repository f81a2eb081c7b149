"""Prove your own tools' undos in your own pytest suite: a real stack, a worker for your app,
and the rollback prover.

With Sagacity installed, pytest loads the plugin (:mod:`sagacity.testing.plugin`) by itself::

    async def test_book_flight_undoes(sagacity_app, sagacity_prover):
        report = await sagacity_prover.prove_rollback(
            sagacity_app.tool("book_flight"),
            args={"traveler": "ada", "destination": "Lisbon", "day": "2027-05-01"},
            probe=flights_booked_for_ada,
        )
        report.assert_ok()

Each :class:`RollbackCase` runs as a real saga on a real worker, its rows journaled.

The names below are imported when first used: pytest loads the plugin in every run, and a
suite that proves nothing should not pay for importing Temporal's SDK.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sagacity.testing.apps import RunningApp, serve_apps
    from sagacity.testing.faults import AttemptLost, InjectedFault
    from sagacity.testing.prover import PROOF_OPTIONS, Probe, RollbackProver
    from sagacity.testing.report import (
        CaseVerdict,
        ProofReport,
        RollbackCase,
        RollbackNotProven,
        proof_table,
    )
    from sagacity.testing.stack import SagacityStack, attach_stack, open_stack

_MODULES = {
    "apps": ["RunningApp", "serve_apps"],
    "faults": ["AttemptLost", "InjectedFault"],
    "prover": ["PROOF_OPTIONS", "Probe", "RollbackProver"],
    "report": ["CaseVerdict", "ProofReport", "RollbackCase", "RollbackNotProven", "proof_table"],
    "stack": ["SagacityStack", "attach_stack", "open_stack"],
}
_HOME = {name: module for module, names in _MODULES.items() for name in names}

__all__ = [
    "PROOF_OPTIONS",
    "AttemptLost",
    "CaseVerdict",
    "InjectedFault",
    "Probe",
    "ProofReport",
    "RollbackCase",
    "RollbackNotProven",
    "RollbackProver",
    "RunningApp",
    "SagacityStack",
    "attach_stack",
    "open_stack",
    "proof_table",
    "serve_apps",
]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'sagacity.testing' has no attribute {name!r}")
    return getattr(importlib.import_module(f"sagacity.testing.{_HOME[name]}"), name)
