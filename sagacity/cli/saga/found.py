"""What a look at a saga found (its result or its live status), printed, and its exit status."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias

import typer

from sagacity.cli.saga.shape import StatusReport
from sagacity.cli.saga.shared import UNDO_FAILING, Usage
from sagacity.temporal.models import Effect, SagaResult, SagaState, SagaStatus
from sagacity.temporal.undo_attempts import failing, reason

if TYPE_CHECKING:  # the Agents SDK takes seconds to import: only for an agent saga's result
    from sagacity.agents.workflow import AgentSagaResult


@dataclass(frozen=True)
class AppWorkflow:
    """A workflow that is not a saga (it answers no ``status`` query): what it returned, as JSON,
    or that it still runs."""

    saga_id: str
    workflow_type: str
    running: bool
    value: Any = None


#: what a saga's workflow returned
Ended: TypeAlias = "SagaResult | AgentSagaResult | AppWorkflow"
#: an ended saga's result, or a running one's status
Found: TypeAlias = "SagaResult | AgentSagaResult | AppWorkflow | SagaStatus"


def report(found: Found, *, as_json: bool, quiet: bool = False) -> int:
    """Print ``found`` (stderr in ``quiet`` mode, where stdout has the id); return the exit status."""
    if as_json:
        if not isinstance(found, AppWorkflow):
            typer.echo(StatusReport.of(found).model_dump_json(indent=2))
        elif found.running:  # no value yet: say what runs
            running = {"workflow_id": found.saga_id, "workflow_type": found.workflow_type}
            typer.echo(json.dumps({**running, "running": True}, indent=2))
        else:  # the app's own result, as it returned it
            typer.echo(json.dumps(found.value, indent=2, ensure_ascii=False))
    else:
        for line in _describe(found):
            typer.echo(line, err=quiet)
    if isinstance(found, SagaStatus) and found.compensating and failing(found.compensating):
        # an undo that keeps failing, not a slow one: said apart from any other running saga
        typer.echo(reason(found.saga_id, found.compensating), err=True)
        return UNDO_FAILING
    state = ended_state(found)
    return 1 if state is not None and state is not SagaState.COMPLETED else 0


def ended_state(found: Found) -> SagaState | None:
    """How the saga ended (an app workflow's result: completed), or None while it runs."""
    if isinstance(found, SagaResult):
        return found.status
    if isinstance(found, AppWorkflow):
        return None if found.running else SagaState.COMPLETED
    if isinstance(found, SagaStatus):
        return None
    return found.saga.status  # an agent saga's


def over(saga: str, current: Found) -> bool:
    """Whether the saga has ended (said on stderr): it takes no abort or resolution then.
    A running workflow that is no saga is bad usage: it would drop the signal unread."""
    if isinstance(current, AppWorkflow) and current.running:
        raise Usage(
            f"workflow {saga} ({current.workflow_type}) is no saga: it takes no abort or resolution"
        )
    ended = ended_state(current)
    if ended is not None:
        typer.echo(f"saga {saga} already ended: {ended.value}", err=True)
    return ended is not None


def _corrected(effect: Effect) -> str:
    """A COMPENSATABLE effect the saga corrected, and what the correction returned."""
    said = f"corrected, not restored: {effect.tool_name} (seq {effect.call_seq})"
    if effect.correction is None:
        return said
    return f"{said}; the correction returned {json.dumps(effect.correction, ensure_ascii=False)}"


def _describe(saga: Found) -> list[str]:
    if isinstance(saga, AppWorkflow):
        if saga.running:
            return [
                f"workflow {saga.saga_id} ({saga.workflow_type}): running "
                "(it answers no saga status query)"
            ]
        value = json.dumps(saga.value, ensure_ascii=False)
        return [f"workflow {saga.saga_id} ({saga.workflow_type}): completed", f"  result: {value}"]
    if not isinstance(saga, SagaResult | SagaStatus):  # an agent saga's result
        lines = _describe(saga.saga)
        lines.append(f"  agent tool calls: {len(saga.steps)}")
        if saga.final_output is not None:
            lines.append(f"  agent said: {saga.final_output}")
        return lines
    if isinstance(saga, SagaResult):
        lines = [f"saga {saga.saga_id}: {saga.status.value} (journal head seq {saga.head.seq})"]
        if saga.status is SagaState.COMPLETED:
            lines.append(f"  result: {json.dumps(saga.value, ensure_ascii=False)}")
        if saga.error is not None:
            lines.append(f"  why: {saga.error.type}: {saga.error.message}")
            rejected = saga.error.rejection
            if rejected is not None and rejected.message is not None:
                lines.append(f"  message from {rejected.by}: {rejected.message}")
        restored = [e.tool_name for e in saga.compensated if e.undone_as == "restored"]
        if restored:
            lines.append("  undone: " + ", ".join(restored))
        lines.extend(f"  {_corrected(e)}" for e in saga.compensated if e.undone_as == "corrected")
        if saga.live_effects:
            lines.append("  still live: " + ", ".join(e.tool_name for e in saga.live_effects))
        if saga.needs_attention:
            lines.append(f"  needs attention: {saga.needs_attention}")
        return lines
    lines = [f"saga {saga.saga_id}: {saga.state.value} (journal head seq {saga.head.seq})"]
    if saga.running:
        lines.append(f"  running: {saga.running}")
    undoing = saga.compensating
    if undoing is not None:
        tried = f"attempt {undoing.attempt}"
        if undoing.last_error is not None:
            tried += f"; last error: {undoing.last_error}"
        lines.append(f"  compensating: {undoing.tool_name} (seq {undoing.call_seq}), {tried}")
    if saga.halted is not None:
        lines.append(f"  held by: {saga.halted.describe()}")
    if saga.executed:
        lines.append(
            "  done: " + ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in saga.executed)
        )
    pending = saga.pending_approval
    if pending is not None:
        lines.append(
            f"  awaits approval: {pending.tool_name} at journal seq {pending.journal_seq} "
            f"(input hash {pending.input_hash})"
        )
        if pending.why:
            lines.append(f"  asked by: {pending.why}")
        lines.append(f"  input: {pending.input_json}")
        if pending.hidden:
            lines.append("  hidden (fingerprinted or removed): " + ", ".join(pending.hidden))
        told = pending.escalation
        if told is not None:
            where = f" to {told.to}" if told.to else ""
            lines.append(f"  escalated at {told.at.isoformat()}{where}: {told.outcome}")
    if saga.suspect is not None:
        lines.append(
            f"  SUSPECT: {saga.suspect.tool_name} at seq {saga.suspect.call_seq} has no outcome: "
            f"{saga.suspect.reason}"
        )
    lines.extend(f"  refused decision: {refused}" for refused in saga.refused_decisions)
    if saga.needs_attention:
        lines.append(f"  needs attention: {saga.needs_attention}")
    return lines
