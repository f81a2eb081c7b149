"""The generic steps workflow: start it from a client with a declarative list of steps.

Its Temporal type is ``sagacity.Steps`` (:data:`STEPS_WORKFLOW`). Sagas started under its
former type ``sagacity.Saga`` run on :class:`SagaWorkflow`, registered alongside it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow

from sagacity.errors import ToolArgumentsInvalid
from sagacity.temporal import names
from sagacity.temporal.checks import steps_refused
from sagacity.temporal.models import (
    SagaCarry,
    SagaProgress,
    SagaResult,
    SagaSpec,
    Step,
    StepsCheck,
    StepsChecked,
)
from sagacity.temporal.saga import Saga
from sagacity.temporal.saga.patches import OPEN_IN_CALL_PATCH, OPEN_PATCH

#: the Temporal workflow type of :class:`StepsWorkflow`
STEPS_WORKFLOW = "sagacity.Steps"
#: the type it had until the engine class ``Saga`` and it stopped sharing a name; deprecated
LEGACY_STEPS_WORKFLOW = "sagacity.Saga"
#: Patch marker (see docs/versioning.md): sagas started before it ran their steps unchecked
VALIDATE_PATCH = "sagacity-validate-steps"
#: sagas from before this marker checked their steps in a local activity of its own, then
#: opened the journal in another (two markers for their patches, two for the activities)
STEPS_OPEN_PATCH = "sagacity-steps-checked-at-open"


#: steps ride in the first call's request beside its arguments when they open the journal there;
#: larger ones are checked in a local activity of their own, so the request stays in its limit
_STEPS_IN_CALL_MAX = 64 * 1024


def _small(steps: list[Step]) -> bool:
    return workflow.payload_converter().to_payload(steps).ByteSize() <= _STEPS_IN_CALL_MAX


def _opening_patched(spec: SagaSpec, patch: str) -> bool:
    """``workflow.patched(patch)`` for a patch choosing how a new saga opens its journal; True
    without a marker (nor Temporal's ``TemporalChangeVersion`` upsert) when the spec carries
    an :attr:`~SagaSpec.engine_version` of 1 or more: every worker that may run the saga knows
    every such patch, so its history cannot predate them.

    A worker of an older release ignores the version and records the marker, taking the same
    new branch (it was not replaying): on a replay the marker, if any, is consumed here.
    """
    if spec.engine_version is None or spec.engine_version < 1:
        return workflow.patched(patch)
    if workflow.unsafe.is_replaying():
        workflow.patched(patch)
    return True


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


async def validate(spec: SagaSpec, saga: Saga) -> None:
    """Refuse steps that cannot run, before any runs: a typed, non-retryable ``StepsInvalid``
    that lists every problem.

    Checked before the saga claims its journal: a refused saga journals nothing and claims
    nothing, so its id stays free for the corrected steps. A Temporal cancel that comes during
    the check aborts ``saga`` like a cancel at any later moment: the saga still ends ABORTED
    (``SagaCancelled``) with its result, instead of the workflow ending cancelled.
    """
    checked: StepsChecked = await saga.shielded(
        workflow.start_local_activity(
            names.VALIDATE_STEPS,
            StepsCheck(steps=spec.steps),
            result_type=StepsChecked,
            start_to_close_timeout=timedelta(seconds=10),
        ),
        local=True,
    )
    if checked.problems:
        raise steps_refused(checked.problems)


# Outside the sandbox: every line this workflow runs is Sagacity's own, deterministic by review
# and by the replay corpus (tests/temporal/histories), and already shared across runs (the plugin
# passes sagacity's modules through). The sandbox's per-activation cost was a third of a saga's
# worker CPU; a user's own workflow that uses Saga stays in the sandbox its author chose.
@workflow.defn(name=STEPS_WORKFLOW, sandboxed=False)
class StepsWorkflow:
    """Runs steps in order; on a failure, abort or rejection, compensates what ran, in reverse."""

    @workflow.init
    def __init__(self, spec: SagaSpec) -> None:
        # the saga's signals and updates exist from the first workflow task
        progress = spec.progress
        self.saga = Saga(spec.options, carry=progress.carry if progress else None)

    @workflow.run
    async def run(self, spec: SagaSpec) -> SagaResult:
        progress = spec.progress
        saga = self.saga
        # a run continued as new goes on with steps already checked
        if (
            progress is None
            and spec.steps
            and spec.options.heartbeat_timeout_s is None
            and _small(spec.steps)
            and _opening_patched(spec, OPEN_IN_CALL_PATCH)
        ):
            # the first step's activity checks the steps and opens the journal before its
            # INTENT (no local activity); with a heartbeat of the saga's own the first call
            # would not be scheduled as its tool's spec says, so such sagas open first
            saga.open_in_first_call(check=spec.steps)
        elif progress is None and _opening_patched(spec, STEPS_OPEN_PATCH):
            # one local activity checks the steps and opens the journal (one marker)
            await saga.open(check=spec.steps)
        elif progress is None and workflow.patched(VALIDATE_PATCH):
            # (reached only by a spec without an engine version: one with it opened above)
            # the saga's own patch is decided here, before the check's local activity: asked
            # after it, a replay of a history whose first workflow task ended there (a query
            # does that) finds no marker in that task and takes the old branch
            workflow.patched(OPEN_PATCH)
            await validate(spec, saga)
        # what later steps' $refs get (secrets and all), and how the journal shows the results
        # redaction changed, which the saga's result shows instead
        results: dict[str, Any] = dict(progress.results) if progress else {}
        shown: dict[str, Any] = dict(progress.shown) if progress else {}
        first = progress.next_step if progress else 0

        def go_on(next_step: int) -> Callable[[SagaCarry], None]:
            def continue_as_new(carry: SagaCarry) -> None:
                # the next run goes on from this step (or this compensation), same journal
                progress = SagaProgress(
                    next_step=next_step, results=results, shown=shown, carry=carry
                )
                workflow.continue_as_new(spec.model_copy(update={"progress": progress}))

            return continue_as_new

        async def steps() -> dict[str, Any]:
            for index in range(first, len(spec.steps)):
                if index > first and saga.continue_as_new_suggested():
                    go_on(index)(saga.carry())
                step = spec.steps[index]
                call = saga.call_last if index == len(spec.steps) - 1 else saga.call
                results[step.key] = await call(step.tool, **resolve_refs(step.args, results))
                journaled = saga.journaled(saga.last_call_seq(step.tool))
                if journaled is not None:
                    shown[step.key] = journaled.result
            return {key: shown.get(key, value) for key, value in results.items()}

        return await saga.run(steps, continue_as_new=go_on(len(spec.steps)))


@workflow.defn(name=LEGACY_STEPS_WORKFLOW, sandboxed=False)
class SagaWorkflow(StepsWorkflow):
    """Deprecated: :class:`StepsWorkflow` under its former type, for sagas started under it."""

    # Temporal wants the run method declared on each workflow class; this one adds no command
    @workflow.run
    async def run(self, spec: SagaSpec) -> SagaResult:
        return await super().run(spec)
