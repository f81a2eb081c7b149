"""The generic saga workflow: start it from a client with a declarative list of steps."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from sagacity.errors import ToolArgumentsInvalid
from sagacity.temporal.models import SagaResult, SagaSpec
from sagacity.temporal.saga import Saga

WORKFLOW_NAME = "sagacity.Saga"


def resolve_refs(value: Any, results: dict[str, Any]) -> Any:
    """Replace ``{"$ref": "step[.field…]"}`` with an earlier step's result (or a field of it)."""
    if isinstance(value, dict):
        if set(value) == {"$ref"}:
            return _lookup(str(value["$ref"]), results)
        return {k: resolve_refs(v, results) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve_refs(v, results) for v in value]
    return value


def _lookup(ref: str, results: dict[str, Any]) -> Any:
    step, *path = ref.split(".")
    if step not in results:
        known = ", ".join(results) or "none yet"
        raise ToolArgumentsInvalid(f"$ref {ref!r} names no earlier step (done: {known})")
    value = results[step]
    for part in path:
        if not isinstance(value, dict) or part not in value:
            raise ToolArgumentsInvalid(f"$ref {ref!r}: step {step!r} result has no field {part!r}")
        value = value[part]
    return value


@workflow.defn(name=WORKFLOW_NAME)
class SagaWorkflow:
    """Runs steps in order; on a failure, abort or rejection, compensates what ran, in reverse."""

    @workflow.run
    async def run(self, spec: SagaSpec) -> SagaResult:
        saga = Saga(spec.options)
        results: dict[str, Any] = {}

        async def steps() -> dict[str, Any]:
            for step in spec.steps:
                results[step.key] = await saga.call(step.tool, **resolve_refs(step.args, results))
            return results

        return await saga.run(steps)
