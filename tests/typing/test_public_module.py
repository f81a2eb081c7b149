"""``sagacity.workflow``'s public names, pinned: removing or renaming one is a breaking change."""

from __future__ import annotations

import sagacity.workflow
from sagacity.temporal.workflow import SagaWorkflow, StepsWorkflow


def test_public_names() -> None:
    assert sorted(sagacity.workflow.__all__) == [
        "Abort",
        "ApprovalRejected",
        "Approve",
        "Decision",
        "ENGINE_VERSION",
        "PayloadTooLarge",
        "Reject",
        "Resolve",
        "Resume",
        "STEPS_WORKFLOW",
        "Saga",
        "SagaAborted",
        "SagaCancelled",
        "SagaOptions",
        "SagaResult",
        "SagaSpec",
        "SagaState",
        "SagaStatus",
        "SagacityError",
        "Step",
        "StepsWorkflow",
        "ToolArgumentsInvalid",
        "ToolFailed",
    ]
    for name in sagacity.workflow.__all__:
        assert getattr(sagacity.workflow, name) is not None


def test_the_steps_workflow_is_not_named_after_the_engine() -> None:
    """``Saga`` is the engine; the generic workflow is ``sagacity.Steps``, and its former type
    ``sagacity.Saga`` is only the deprecated alias's."""
    assert defn(StepsWorkflow) == sagacity.workflow.STEPS_WORKFLOW == "sagacity.Steps"
    assert defn(SagaWorkflow) == "sagacity.Saga"


def defn(cls: type) -> str:
    return str(getattr(cls, "__temporal_workflow_definition").name)
