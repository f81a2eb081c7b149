"""``sagacity saga``: start a saga, see where it is, abort it, resolve a SUSPECT call, read its journal.

``start`` prints the saga id on stdout (so ``SAGA=$(sagacity saga start …)`` works) and its
progress on stderr. ``--wait`` returns when the saga has ended *or* stopped for a human (an
approval, a SUSPECT call), since nothing but that human can move it on. ``resolve`` is that
human's answer for a SUSPECT call: whether it took effect. ``abort --dry-run`` says what an abort
would compensate, in order, and what would stay live, and sends and writes nothing.

``start --workflow NAME --input JSON`` starts any workflow the app's worker registers, with that
JSON (or ``@file.json``) as its one argument; ``status`` and ``--wait`` print what it returned
whatever its type (a saga's or an agent saga's result, else the value as JSON).

Exit status: 0 done or waiting for a human, 1 the saga did not complete (compensated, aborted,
failed), refused a resolution, or its journal does not verify (chain or anchors), 2 bad usage or
input (one line on stderr, never a traceback) or unknown saga, 3 the saga cannot move on and the
message says why: no worker polls its task queue, its workflow task is failing (the failure's
message: an input that does not decode, a bug), or no worker registers its workflow type, 4 the
saga compensates and its running compensation has failed 3 attempts (and is retried): one line
on stderr names the tool, the attempt and the last error.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Coroutine
from contextlib import aclosing, asynccontextmanager, suppress
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeAlias

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.table import Table
from rich.text import Text
from temporalio.api.enums.v1 import PendingWorkflowTaskState, TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest
from temporalio.client import (
    Client,
    WorkflowExecutionDescription,
    WorkflowExecutionStatus,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowQueryFailedError,
)
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import ApplicationError, WorkflowAlreadyStartedError
from temporalio.service import RPCError, RPCStatusCode

from sagacity.approvals.suspects import Resolution, resolve_suspect
from sagacity.cli._common import configured_checkpoints, signing_identity
from sagacity.cli._exit import exit_now, hard_exit
from sagacity.cli.db import journal_url_or_exit
from sagacity.cli.rollback import live_lines
from sagacity.errors import InvalidInput, SagacityError, SagaNotFound
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.decisions import Keyring, Signer
from sagacity.evidence.report import SagaReport, Source, saga_report
from sagacity.inputs import check_name, invalid, load_json
from sagacity.journal import (
    Entry,
    Planned,
    RollbackPlan,
    format_timestamp,
    rollback_plan,
    verify_rows,
)
from sagacity.observability import tracing
from sagacity.settings import Settings, load_settings
from sagacity.store import JournalStore
from sagacity.temporal import names
from sagacity.temporal.catalog import recorded_catalog
from sagacity.temporal.models import (
    Abort,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.task_health import causes, task_failure
from sagacity.temporal.undo_attempts import failing, reason, with_attempts
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.tools import Reversibility
from sagacity.worker import connect
from workflows.order.workflows import OrderRequest, order_steps

if TYPE_CHECKING:  # the Agents SDK takes seconds to import: only for an agent saga's result
    from sagacity.agents.workflow import AgentSagaResult

__all__ = ["app"]


ORDER_WORKFLOW = "order.PlaceOrder"
#: states in which only a human can move the saga on
WAITING = frozenset({SagaState.AWAITING_APPROVAL, SagaState.SUSPECT})
_QUERY_TIMEOUT = timedelta(seconds=10)
#: a workflow task scheduled this long and not picked up: look whether any worker polls
_UNPICKED = timedelta(seconds=3)
#: a steps file larger than this is refused (Temporal refuses workflow inputs over 2 MB)
MAX_STEPS_FILE = 1024 * 1024
#: exit status of a saga that cannot move on (no worker, a failing workflow task)
STUCK = 3
#: exit status of a saga whose running compensation keeps failing (see ``undo_attempts``)
UNDO_FAILING = 4
#: Temporal's default limit on a workflow id's length
_ID_MAX = 1000

app = typer.Typer(
    name="saga",
    help="Start sagas, follow them, abort them, read their journal.",
    no_args_is_help=True,
)

SagaId = Annotated[str, typer.Argument(help="The saga id (its Temporal workflow id).")]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of text.")]
Wait = Annotated[
    bool,
    typer.Option(
        "--wait",
        help="Return once the saga has ended, awaits a human, or its compensation keeps failing "
        "(exit 4).",
    ),
]


class _Usage(Exception):
    """Bad usage: exit 2 with this message."""


class Stuck(SagacityError):
    """The saga's workflow cannot move on, for a reason Temporal can tell (exit 3)."""


class NoWorker(Stuck):
    """No worker polls the workflow's task queue."""


class WorkflowTaskFailing(Stuck):
    """The workflow's task fails on the worker: the input does not decode, or its code raises."""


class WorkflowNotRegistered(Stuck):
    """The worker polling the task queue does not register the workflow's type."""


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


def _settings(**overrides: Any) -> Settings:
    try:
        return load_settings(**{k: v for k, v in overrides.items() if v is not None})
    except SagacityError as exc:
        raise _Usage(str(exc)) from None


def _run(work: Coroutine[Any, Any, int]) -> NoReturn:
    """Run a command's coroutine and exit with its status; errors are one line on stderr.

    Leaves through :func:`exit_now` itself: ``typer.Exit`` is not click's ``Exit`` (typer has
    its own class now), so ``hard_exit`` would not see it and the process would risk the SDK's
    teardown crash.
    """
    try:
        code = asyncio.run(work)
    except (_Usage, InvalidInput, SagaNotFound) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 2
    except Stuck as exc:
        typer.echo(f"error: {exc}", err=True)
        code = STUCK
    except (SagacityError, RPCError) as exc:
        typer.echo(f"error: {exc}", err=True)
        code = 1
    exit_now(code)


@asynccontextmanager
async def _client(settings: Settings) -> AsyncIterator[Client]:
    with tracing(settings, "sagacity-cli") as interceptors:
        try:
            client = await connect(
                settings, SagacityPlugin(codec=settings.payload_codec()), interceptors=interceptors
            )
        except SagacityError as exc:
            raise _Usage(str(exc)) from None
        except RuntimeError as exc:  # the SDK's "Failed client connect: …"
            raise _Usage(f"cannot reach Temporal at {settings.temporal_address}: {exc}") from None
        yield client


def _input(
    workflow: str, steps: Path | None, order: str | None, given: str | None, options: SagaOptions
) -> Any:
    """The workflow's argument from ``--input``, ``--steps`` or ``--order``; ``options`` unless
    the steps file has its own."""
    if [steps, order, given].count(None) != 2:
        raise _Usage(
            "give one of --steps FILE.json or --order PRODUCT:QUANTITY, "
            "or --workflow NAME --input JSON"
        )
    if given is not None:
        return _json_input(given)
    if steps is not None:
        if workflow != STEPS_WORKFLOW:
            raise _Usage(f"--steps runs the generic {STEPS_WORKFLOW} workflow, not {workflow}")
        return _steps(steps, options)
    assert order is not None
    product, _, quantity = order.partition(":")
    if not product or not quantity.isdigit() or int(quantity) < 1:
        raise _Usage(f"--order expects PRODUCT:QUANTITY, e.g. p-1:2; got {order!r}")
    if workflow == STEPS_WORKFLOW:
        return order_steps(product, int(quantity), options)
    if workflow == ORDER_WORKFLOW:
        return OrderRequest(product_id=product, quantity=int(quantity), options=options)
    raise _Usage(f"--order starts {ORDER_WORKFLOW} or {STEPS_WORKFLOW}, not {workflow}")


def _read(path: Path, *, what: str) -> bytes:
    """A JSON input file's bytes, refused over :data:`MAX_STEPS_FILE` or unreadable (exit 2)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_STEPS_FILE + 1)
    except OSError as exc:
        raise _Usage(f"{what}: {exc.strerror or exc}") from None
    if len(data) > MAX_STEPS_FILE:
        raise _Usage(f"{what}: the file is over {MAX_STEPS_FILE // 1024} KiB")
    return data


def _json_input(given: str) -> Any:
    """``--input``: JSON text, or ``@file.json``; the workflow's one argument, decoded by it."""
    if given.startswith("@"):
        what = f"--input {given}"
        return load_json(_read(Path(given[1:]), what=what), what=what)
    return load_json(given, what="--input")


def _steps(path: Path, options: SagaOptions) -> SagaSpec:
    """A steps file, checked whole before anything starts: bad input is one line, exit 2."""
    what = f"--steps {path}"
    raw = load_json(_read(path, what=what), what=what)
    document = raw if isinstance(raw, dict) else {"steps": raw}
    _known_fields(document, what=what)
    try:
        spec = SagaSpec.model_validate({"options": options.model_dump(), **document})
    except ValidationError as exc:
        raise invalid(exc, what=what) from None
    if not spec.steps:
        raise InvalidInput(f"{what}: no steps to run")
    done: list[str] = []
    for i, step in enumerate(spec.steps):
        check_name(step.tool, what=f"{what}: steps[{i}].tool")
        if step.id is not None:
            check_name(step.id, what=f"{what}: steps[{i}].id")
        _check_refs(step, done, what=f"{what}: steps[{i}].args")
        done.append(step.key)
    return spec


def _known_fields(document: dict[str, Any], *, what: str) -> None:
    """A misspelt field (``arg`` for ``args``) is refused, not silently ignored."""
    found: list[tuple[str, Any, type[BaseModel]]] = [("", document, SagaSpec)]
    options = document.get("options")
    if isinstance(options, dict):
        found.append(("options", options, SagaOptions))
    steps = document.get("steps")
    if isinstance(steps, list):
        found += [(f"steps[{i}]", s, Step) for i, s in enumerate(steps) if isinstance(s, dict)]
    for where, fields, model in found:
        unknown = sorted(set(fields) - set(model.model_fields))
        if unknown:
            at = f" in {where}" if where else ""
            known = ", ".join(model.model_fields)
            raise InvalidInput(f"{what}: unknown field {unknown[0]!r}{at} (known: {known})")


def _check_refs(step: Step, earlier: list[str], *, what: str) -> None:
    """Each ``{"$ref": "step[.field…]"}`` in the step's arguments names an earlier step."""
    stack: list[Any] = [step.args]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if set(value) == {"$ref"}:
                ref = value["$ref"]
                if not isinstance(ref, str) or not ref:
                    raise InvalidInput(f"{what}: a $ref must be text: step[.field…]; got {ref!r}")
                name = ref.split(".")[0]
                if name not in earlier:
                    known = ", ".join(earlier) or "none"
                    raise InvalidInput(
                        f"{what}: $ref {ref!r} names no earlier step (earlier: {known})"
                    )
            else:
                stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


async def _settle(client: Client, handle: WorkflowHandle[Any, Any]) -> Found:
    """Wait until the saga ends (its result), waits for a human or its compensation keeps
    failing (its status)."""
    while True:
        found = await _look(client, handle, patient=True)
        if found is None:  # a workflow task is under way: a query would only wait on it
            await asyncio.sleep(0.25)
            continue
        if isinstance(found, AppWorkflow) and found.running:
            return await _result(handle, found.workflow_type)  # nothing to follow but its end
        if not isinstance(found, SagaStatus) or found.state in WAITING:
            return found
        if failing(found.compensating):
            return found
        await asyncio.sleep(0.25)


async def _status(client: Client, handle: WorkflowHandle[Any, Any]) -> Found:
    """The result of an ended saga (from history: no worker needed), else its live status.

    :class:`Stuck` when a running saga cannot answer and Temporal can tell why.
    """
    found = await _look(client, handle, patient=False)
    assert found is not None  # only a patient look comes back empty
    return found


async def _look(client: Client, handle: WorkflowHandle[Any, Any], *, patient: bool) -> Found | None:
    """:func:`_status`; ``patient``: None rather than a query while a workflow task is under
    way. A failing task is reported once it failed; one no worker picks up, after
    :data:`_UNPICKED`."""
    try:
        described = await handle.describe()
    except RPCError as exc:
        if exc.status is RPCStatusCode.NOT_FOUND:
            raise _Usage(f"no saga {handle.id!r} in this Temporal namespace") from None
        raise
    if described.status is not WorkflowExecutionStatus.RUNNING:
        return await _result(handle, described.workflow_type)
    pending = described.raw_description.pending_workflow_task
    if pending.attempt > 1:  # the task failed at least once: say why rather than wait
        failing = await _task_failure(client, handle, described)
        if failing is not None:
            raise failing
    states = PendingWorkflowTaskState
    if pending.state == states.PENDING_WORKFLOW_TASK_STATE_SCHEDULED:
        waited = datetime.now(UTC) - pending.scheduled_time.ToDatetime(UTC)
        if waited > _UNPICKED:  # no worker took it: is there one?
            stuck = await _stuck(client, handle, described)
            if stuck is not None:
                raise stuck
    if patient and pending.state != states.PENDING_WORKFLOW_TASK_STATE_UNSPECIFIED:
        return None
    try:
        live: SagaStatus = await handle.query(
            "status", result_type=SagaStatus, rpc_timeout=_QUERY_TIMEOUT
        )
    except WorkflowQueryFailedError:
        # the worker answered, but not a status (no such query, and its message may be
        # encrypted): a workflow of the app's own, not a saga
        return AppWorkflow(handle.id, described.workflow_type, running=True)
    except RPCError as exc:
        raise await _stuck(client, handle, described) or SagacityError(
            f"saga {handle.id} is running but no worker answered its status query: {exc}"
        ) from None
    return await with_attempts(client, live, described)


async def _result(handle: WorkflowHandle[Any, Any], workflow_type: str) -> Ended:
    """What the workflow returned, as the type it has; a failed workflow is an error (exit 1)."""
    try:
        raw = await handle.result()
    except WorkflowFailureError as exc:
        cause = exc.cause
        if isinstance(cause, ApplicationError) and cause.type == "StepsInvalid":
            # refused whole before any step ran: bad input, like a malformed steps file
            raise InvalidInput(f"the worker refused saga {handle.id}'s steps: {cause}") from None
        why = f"{type(cause).__name__}: {cause}" if cause is not None else str(exc)
        raise SagacityError(
            f"workflow {handle.id} ({workflow_type}) did not complete: {why}"
        ) from None
    if isinstance(raw, dict) and {"saga", "steps"} <= raw.keys():
        from sagacity.agents.workflow import AgentSagaResult  # imported only here: see above

        with suppress(ValidationError):
            return AgentSagaResult.model_validate(raw)
    elif isinstance(raw, dict):
        with suppress(ValidationError):
            return SagaResult.model_validate(raw)
    return AppWorkflow(handle.id, workflow_type, running=False, value=raw)


async def _stuck(
    client: Client, handle: WorkflowHandle[Any, Any], described: WorkflowExecutionDescription
) -> Stuck | None:
    """Why a running workflow does not answer: its task fails, or no worker polls its queue."""
    failing = await _task_failure(client, handle, described)
    if failing is not None:
        return failing
    queue = described.task_queue
    polled = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=client.namespace,
            task_queue=TaskQueue(name=queue),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    if not polled.pollers:
        return NoWorker(
            f"no worker polls task queue {queue!r}, where saga {handle.id} "
            f"({described.workflow_type}) waits: start one (`sagacity worker --app …`) with "
            "SAGACITY_TASK_QUEUE set to it"
        )
    return None


async def _task_failure(
    client: Client, handle: WorkflowHandle[Any, Any], described: WorkflowExecutionDescription
) -> Stuck | None:
    """The failure that holds the saga's workflow task, as a typed error; None if none since its
    last completed workflow task."""
    failing = await task_failure(client, handle.id, described=described)
    if failing is None:
        return None
    kind, message = described.workflow_type, failing.message
    if "not registered" in message:
        return WorkflowNotRegistered(
            f"no worker on task queue {described.task_queue!r} registers workflow type "
            f"{kind!r} (saga {handle.id}): {message}"
        )
    return WorkflowTaskFailing(
        f"the workflow task of saga {handle.id} ({kind}) is failing: {message} ({failing.cause}, "
        f"attempt {failing.attempt}; the worker retries it: fix the code and restart the worker, "
        f"or end it with `temporal workflow terminate --workflow-id {handle.id}` and start it "
        "again)"
    )


def _report(found: Found, *, as_json: bool, quiet: bool = False) -> int:
    """Print ``found`` (stderr in ``quiet`` mode, where stdout has the id); return the exit status."""
    if as_json:
        if not isinstance(found, AppWorkflow):
            typer.echo(found.model_dump_json(indent=2))
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
    state = _ended_state(found)
    return 1 if state is not None and state is not SagaState.COMPLETED else 0


def _ended_state(found: Found) -> SagaState | None:
    """How the saga ended (an app workflow's result: completed), or None while it runs."""
    if isinstance(found, SagaResult):
        return found.status
    if isinstance(found, AppWorkflow):
        return None if found.running else SagaState.COMPLETED
    if isinstance(found, SagaStatus):
        return None
    return found.saga.status  # an agent saga's


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
        if saga.error is not None:
            lines.append(f"  why: {saga.error.type}: {saga.error.message}")
        if saga.compensated:
            lines.append("  undone: " + ", ".join(e.tool_name for e in saga.compensated))
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
        lines.append(f"  input: {pending.input_json}")
        if pending.hidden:
            lines.append("  hidden (fingerprinted or removed): " + ", ".join(pending.hidden))
    if saga.suspect is not None:
        lines.append(
            f"  SUSPECT: {saga.suspect.tool_name} at seq {saga.suspect.call_seq} has no outcome: "
            f"{saga.suspect.reason}"
        )
    lines.extend(f"  refused decision: {refused}" for refused in saga.refused_decisions)
    if saga.needs_attention:
        lines.append(f"  needs attention: {saga.needs_attention}")
    return lines


@app.command("start")
@hard_exit
def start(
    workflow: Annotated[
        str | None,
        typer.Option(
            "--workflow",
            "--app-workflow",
            help="Workflow type to run: any the app's worker registers, with --input; "
            f"{ORDER_WORKFLOW} or {STEPS_WORKFLOW} with --order or --steps "
            "(default: the one --order or --steps implies).",
            show_default=False,
        ),
    ] = None,
    given: Annotated[
        str | None,
        typer.Option(
            "--input",
            help="With --workflow: the workflow's one argument as JSON, or @FILE.json.",
            show_default=False,
        ),
    ] = None,
    steps: Annotated[
        Path | None,
        typer.Option(
            "--steps",
            help=f'JSON file: {{"steps": [{{"tool": …, "args": {{…}}}}, …], "options": {{…}}}} '
            f"for {STEPS_WORKFLOW}.",
            show_default=False,
        ),
    ] = None,
    order: Annotated[
        str | None,
        typer.Option(
            "--order", help="The Order example: PRODUCT:QUANTITY, e.g. p-1:2.", show_default=False
        ),
    ] = None,
    saga_id: Annotated[
        str | None,
        typer.Option(
            "--id", help="Saga id (default: order-… or saga-… at random).", show_default=False
        ),
    ] = None,
    task_queue: Annotated[
        str | None,
        typer.Option("--task-queue", help="Task queue (SAGACITY_TASK_QUEUE).", show_default=False),
    ] = None,
    wait: Wait = False,
    as_json: AsJson = False,
) -> None:
    """Start a saga and print its id; with --wait, follow it until it ends or awaits a human."""

    async def work() -> int:
        settings = _settings(task_queue=task_queue)
        if given is not None and workflow is None:
            raise _Usage("--input goes with --workflow NAME: the workflow type it is the input of")
        name = workflow or (STEPS_WORKFLOW if steps is not None else ORDER_WORKFLOW)
        # the deadline setting is the default for sagas started here; a steps file may override
        options = SagaOptions(approval_deadline_s=settings.approval_deadline.total_seconds())
        argument = _input(name, steps, order, given, options)
        if saga_id is not None:
            check_name(saga_id, what="--id", max_len=_ID_MAX)
        sid = saga_id or f"{'order' if order else 'saga'}-{uuid.uuid4().hex[:8]}"
        async with _client(settings) as client:
            try:
                handle = await client.start_workflow(
                    name,
                    argument,
                    id=sid,
                    task_queue=settings.task_queue,
                    # one id, one journal: a closed saga's id is not reused either
                    id_reuse_policy=WorkflowIDReusePolicy.REJECT_DUPLICATE,
                )
            except WorkflowAlreadyStartedError:
                raise _Usage(
                    f"a saga with id {sid!r} already exists (one id names one journal)"
                ) from None
            typer.echo(f"started {name} as {sid} on task queue {settings.task_queue}", err=True)
            if not wait:
                typer.echo(sid)
                return 0
            settled = await _settle(client, handle)
            if not as_json:
                typer.echo(sid)
            return _report(settled, as_json=as_json, quiet=True)

    _run(work())


@app.command("status")
@hard_exit
def status(saga: SagaId, wait: Wait = False, as_json: AsJson = False) -> None:
    """Where the saga is: state, journal head, what it waits for; or how it ended."""

    async def work() -> int:
        settings = _settings()
        async with _client(settings) as client:
            handle = client.get_workflow_handle(saga)
            try:
                found = await (_settle(client, handle) if wait else _status(client, handle))
            except SagacityError as exc:
                # a workflow that closed unfinished (terminated, timed out) left these live
                lines, undo_failing = await live_lines(client, settings, saga)
                for line in lines:
                    typer.echo(line, err=True)
                if undo_failing is None:
                    raise
                # a rollback of it runs, and its undo keeps failing: told apart, as a saga's
                typer.echo(f"error: {exc}", err=True)
                typer.echo(undo_failing, err=True)
                return UNDO_FAILING
            code = _report(found, as_json=as_json)
            if isinstance(found, SagaStatus) and not as_json:
                for line in await _retrying(client, handle):
                    typer.echo(line)
            return code

    _run(work())


async def _retrying(client: Client, handle: WorkflowHandle[Any, Any]) -> list[str]:
    """A line for each of the saga's activities that failed and is retried, with its last error
    (its compensation has a line of its own)."""
    described = await handle.describe()
    lines = []
    for pending in described.raw_description.pending_activities:
        if pending.attempt <= 1 or not pending.HasField("last_failure"):
            continue
        if pending.activity_type.name == names.COMPENSATE:
            continue  # on the saga's own "compensating" line
        failure = await client.data_converter.decode_failure(pending.last_failure)
        error = causes(failure)
        if isinstance(failure, ApplicationError) and failure.type:
            error = f"{failure.type}: {error}"
        lines.append(
            f"  retrying: {pending.activity_type.name} (activity {pending.activity_id}), "
            f"attempt {pending.attempt}; last error: {error}"
        )
    return lines


@app.command("abort")
@hard_exit
def abort(
    saga: SagaId,
    reason: Annotated[
        str | None,
        typer.Option("--reason", help="Why; journaled with the abort.", show_default=False),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who aborts (default: whom SAGACITY_APPROVER_KEY signs for in the keyring, "
            "else your user name); journaled, and signed with that key when it is set.",
            show_default=False,
        ),
    ] = None,
    wait: Wait = False,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run",
            help="Only say what would be compensated, in order, and what would stay live: "
            "nothing is sent or written.",
        ),
    ] = False,
    as_json: AsJson = False,
) -> None:
    """Abort a running saga: it stops and compensates what ran, in reverse.

    With --dry-run, exit 0 after printing the plan; 1 when the saga already ended.
    """
    url = journal_url_or_exit(None) if dry_run else None

    async def work() -> int:
        check_name(saga, what="saga id", max_len=_ID_MAX)
        if url is not None:
            return await _dry_run(saga, url, as_json=as_json)
        if reason is None:
            raise _Usage("--reason is required: say why the saga is aborted (it is journaled)")
        settings = _settings()
        signer, keyring = _keys(settings)
        async with _client(settings) as client:
            handle = client.get_workflow_handle(saga)
            current = await _status(client, handle)
            if _over(saga, current):
                return 1
            try:
                payload = Abort(reason=reason, by=by or _operator(signer, keyring))
            except ValidationError as exc:
                raise invalid(exc, what="abort") from None
            if signer is not None:
                signed = signer.sign(payload.statement(saga))
                payload = payload.model_copy(update={"signature": signed})
            await handle.signal("abort", payload)
            signed_as = "signed" if signer is not None else "unsigned"
            typer.echo(
                f"abort sent to {saga} by {payload.by} ({signed_as}): it compensates what ran",
                err=True,
            )
            return _report(await _settle(client, handle), as_json=False) if wait else 0

    _run(work())


def _over(saga: str, current: Found) -> bool:
    """Whether the saga has ended (said on stderr): it takes no abort or resolution then.
    A running workflow that is no saga is bad usage: it would drop the signal unread."""
    if isinstance(current, AppWorkflow) and current.running:
        raise _Usage(
            f"workflow {saga} ({current.workflow_type}) is no saga: it takes no abort or resolution"
        )
    ended = _ended_state(current)
    if ended is not None:
        typer.echo(f"saga {saga} already ended: {ended.value}", err=True)
    return ended is not None


def _keys(settings: Settings) -> tuple[Signer | None, Keyring | None]:
    """The operator's signing key (``SAGACITY_APPROVER_KEY``) and the keyring, or exit 2."""
    try:
        key = settings.approver_key
        return (Signer.open(key) if key else None), settings.load_keyring()
    except SagacityError as exc:
        raise _Usage(str(exc)) from None


def _operator(signer: Signer | None, keyring: Keyring | None) -> str:
    """Who the CLI acts as: whom the signing key signs for in the keyring, else the login."""
    try:
        return signing_identity(signer, keyring)
    except (OSError, KeyError):  # no user name in this environment (a bare container)
        raise _Usage("no user name found: pass --by NAME") from None


async def _dry_run(saga: str, url: str, *, as_json: bool) -> int:
    """Print what an abort of ``saga`` would do, from its journal; send and write nothing."""
    async with _client(_settings()) as client:
        handle = client.get_workflow_handle(saga)
        current = await _status(client, handle)
        # the catalog the saga decides with: whether each tool has a compensation
        catalog = await recorded_catalog(client, handle)
    async with await JournalStore.open(url, min_size=1, max_size=1) as store:
        rows = await store.read(saga)
    plan = rollback_plan(rows, {name: s.has_compensation for name, s in catalog.items()})
    over = _ended_state(current)
    ended = over is not None
    if isinstance(current, SagaStatus):
        state = current.state
    elif over is None:
        raise _Usage(f"workflow {saga} is no saga: it has nothing an abort would compensate")
    else:
        state = over
    kinds = {name: s.reversibility for name, s in catalog.items()}
    document = _plan_json(saga, state, ended, plan, kinds)
    if as_json:
        typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        _print_plan(document)
    return 1 if ended else 0


def _plan_json(
    saga: str,
    state: SagaState,
    ended: bool,
    plan: RollbackPlan,
    kinds: dict[str, Reversibility],
) -> dict[str, Any]:
    def call(step: Planned) -> dict[str, Any]:
        tool = step.call.intent.tool_name
        kind = kinds.get(tool)
        return {
            "seq": step.call.intent.seq,
            "tool_name": tool,
            "reversibility": kind.value if kind else None,
            "check": step.check,
        }

    def why(step: Planned) -> str:
        kind = kinds.get(step.call.intent.tool_name)
        if ended:
            return f"the saga ended {state.value}"
        if kind is None:
            return "the saga's worker knows no such tool"
        if kind is Reversibility.IRREVERSIBLE:
            return "nothing undoes it"
        return step.check or ""  # a compensation that failed

    waiting = plan.awaiting_approval
    return {
        "saga_id": saga,
        "state": state.value,
        "ended": ended,
        "dry_run": True,
        # an ended saga takes no abort: nothing more is compensated
        "compensate": [] if ended else [call(s) for s in plan.compensate],
        "stays_live": [{**call(s), "why": why(s)} for s in (plan.steps if ended else plan.live)],
        "already_compensated": [
            {"seq": c.intent.seq, "tool_name": c.intent.tool_name} for c in plan.compensated
        ],
        "awaiting_approval": None
        if waiting is None or ended
        else {"seq": waiting.seq, "tool_name": waiting.tool_name},
    }


def _print_plan(plan: dict[str, Any]) -> None:
    saga, state = plan["saga_id"], plan["state"]
    if plan["ended"]:
        typer.echo(f"saga {saga} already ended: {state}; an abort would compensate nothing")
    else:
        typer.echo(f"saga {saga}: {state}; an abort would compensate, newest first:")
    table = Table(title_justify="left")
    for column in ("#", "seq", "tool", "reversibility", "on abort", "check"):
        table.add_column(column, overflow="fold", no_wrap=column in {"#", "seq"})
    for i, step in enumerate(plan["compensate"], 1):
        table.add_row(
            str(i),
            str(step["seq"]),
            step["tool_name"],
            step["reversibility"] or "?",
            "compensated",
            Text(step["check"] or "", style="bold yellow"),
        )
    for step in plan["stays_live"]:
        table.add_row(
            "",
            str(step["seq"]),
            step["tool_name"],
            step["reversibility"] or "?",
            Text(f"stays live: {step['why']}", style="yellow"),
            Text(step["check"] or "", style="bold yellow"),
        )
    if table.rows:
        Console(width=max(Console().width, 120)).print(table)
    else:
        typer.echo("  no call has taken effect")
    done = plan["already_compensated"]
    if done:
        typer.echo(
            "already compensated: " + ", ".join(f"{c['tool_name']} (seq {c['seq']})" for c in done)
        )
    waiting = plan["awaiting_approval"]
    if waiting is not None:
        typer.echo(
            f"{waiting['tool_name']} waits for approval at seq {waiting['seq']}: "
            "aborted, it never runs"
        )
    flagged = [s for s in [*plan["compensate"], *plan["stays_live"]] if s["check"]]
    for step in flagged:
        typer.echo(f"CHECK {step['tool_name']} (seq {step['seq']}): {step['check']}")
    typer.echo("dry run: nothing was sent to the saga and nothing was written")


@app.command("resolve")
@hard_exit
def resolve(
    saga: SagaId,
    seq: Annotated[
        int,
        typer.Option(
            "--seq",
            min=1,
            help="Journal seq of the SUSPECT call's INTENT row (`saga status` shows it).",
            show_default=False,
        ),
    ],
    happened: Annotated[
        bool,
        typer.Option(
            "--happened/--did-not-happen",
            help="Whether the call took effect (look in the system it acts on).",
            show_default=False,
        ),
    ],
    result: Annotated[
        str | None,
        typer.Option(
            "--result",
            help="With --happened: what the call returned, as JSON, for later steps and its "
            "compensation.",
            show_default=False,
        ),
    ] = None,
    by: Annotated[
        str | None,
        typer.Option(
            "--by",
            help="Who resolves (default: whom SAGACITY_APPROVER_KEY signs for in the keyring, "
            "else your user name); journaled.",
            show_default=False,
        ),
    ] = None,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", min=0.5, max=600, help="Seconds to wait for the saga to take it."
        ),
    ] = 10.0,
    as_json: AsJson = False,
) -> None:
    """Say whether a SUSPECT call took effect: the saga journals it (EXECUTED or FAILED) and goes on.

    Exit 0 once the saga took the resolution; 1 if it refused it, has no SUSPECT call at that
    seq, or did not take it within --timeout; 2 for bad input or an unknown saga.
    """

    async def work() -> int:
        if result is not None and not happened:
            raise _Usage("--result is only for a call that happened (--happened)")
        value = None if result is None else load_json(result, what="--result")
        settings = _settings()
        signer, keyring = _keys(settings)
        resolver = check_name(by if by is not None else _operator(signer, keyring), what="--by")
        async with _client(settings) as client:
            current = await _status(client, client.get_workflow_handle(saga))
            if _over(saga, current):
                return 1
            journal = await _journal(settings)
            try:
                done = await resolve_suspect(
                    client,
                    saga,
                    seq,
                    resolver=resolver,
                    happened=happened,
                    result=value,
                    journal=journal,
                    wait=timedelta(seconds=timeout),
                    resolvers=settings.resolvers,
                    signer=signer,
                    keyring=keyring,
                )
            finally:
                if journal is not None:
                    await journal.close()
        if as_json:
            typer.echo(done.model_dump_json(indent=2))
        else:
            typer.echo(_resolved(done))
        return 0

    _run(work())


async def _journal(settings: Settings) -> JournalStore | None:
    """The journal, to read what a resolution wrote; None (ask the saga instead) if out of reach."""
    if not settings.database_url:
        return None
    try:
        return await JournalStore.open(settings.database_url, min_size=1, max_size=1)
    except SagacityError:
        return None


def _resolved(done: Resolution) -> str:
    said = "happened" if done.happened else "did not happen"
    line = (
        f"saga {done.saga_id} took the resolution: {done.tool_name} at seq {done.call_seq} "
        f"{said} (resolved by {done.resolver})"
    )
    if done.outcome is None:
        return line + "; its outcome row is not journaled yet (see `sagacity saga journal`)"
    line += f"; journaled {done.outcome} at seq {done.call_seq + 1}"
    if (done.outcome == "EXECUTED") != done.happened:
        line += " (written by the attempt the worker lost: the call's own outcome stands)"
    return line


def _row_json(entry: Entry) -> dict[str, Any]:
    return {
        "saga_id": entry.saga_id,
        "seq": entry.seq,
        # the exact text the row's hash covers (docs/hash-rules.md), not a display form
        "timestamp": format_timestamp(entry.timestamp),
        "tool_name": entry.tool_name,
        "phase": str(entry.phase),
        "input": entry.input,
        "payload": entry.payload,
        "hash": entry.hash,
    }


def _verdict_json(report: SagaReport, anchored: bool) -> dict[str, Any]:
    verdict = report.verdict
    problem = verdict.problem
    return {
        "ok": report.ok,
        "rows": verdict.rows,
        "head_seq": verdict.head_seq,
        "head_hash": verdict.head_hash,
        "problem": None
        if problem is None
        else {"seq": problem.seq, "fault": problem.fault.value, "detail": problem.detail},
        # INTENT rows no EXECUTED or FAILED follows: SUSPECT, or still running
        "dangling_intents": [{"seq": d.seq, "tool_name": d.tool_name} for d in verdict.dangling],
        "anchored": anchored,
        "anchors": [c.to_dict() for c in report.checks],
    }


#: marks an INTENT row no outcome row follows
NO_OUTCOME = "[NO OUTCOME]"
#: what a chain that verifies still cannot show when no anchor was compared with it
CHAIN_ONLY = "hash chain only: a cut tail or a recomputed chain is not detectable without anchors"


def _clip(text: str, width: int = 48) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _anchors(settings: Settings) -> CheckpointDir | None:
    """The configured checkpoints, or None when there are none to compare with."""
    try:
        return configured_checkpoints(settings)
    except SagacityError as exc:
        raise _Usage(str(exc)) from None


@app.command("journal")
def journal(
    saga: SagaId,
    full: Annotated[
        bool, typer.Option("--full", help="Whole hashes, inputs and payloads.")
    ] = False,
    as_json: AsJson = False,
) -> None:
    """The saga's journal rows from Postgres, with their hashes, and whether they verify.

    With checkpoints configured (SAGACITY_CHECKPOINT_DIR) the chain is also compared with them;
    without, only the hash chain is checked, and the verdict says what that cannot show.
    """

    async def work() -> int:
        settings = _settings()
        url = journal_url_or_exit(None)  # as `verify` finds it: the dev stack's, when unset
        checkpoints = _anchors(settings)
        # two connections: verify_journal streams rows while it looks up those anchors name
        async with await JournalStore.open(url, max_size=2) as store:
            rows = await store.read(saga)
            if checkpoints is None:
                report = saga_report(verify_rows(saga, rows), [])
            else:
                reports = verify_journal(store, saga_ids=[saga], checkpoints=checkpoints)
                async with aclosing(reports) as stream:
                    (report,) = [r async for r in stream]
        if not rows and checkpoints is None:
            raise _Usage(f"saga {saga!r} has no journal rows")
        anchored = checkpoints is not None
        if as_json:
            document = {
                "saga_id": saga,
                "rows": [_row_json(r) for r in rows],
                "verdict": _verdict_json(report, anchored),
            }
            typer.echo(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            _print_journal(saga, rows, report, anchored=anchored, full=full)
        return 0 if report.ok else 1

    _run(work())


def _print_journal(
    saga: str, rows: list[Entry], report: SagaReport, *, anchored: bool, full: bool
) -> None:
    verdict = report.verdict
    if rows:
        table = Table(title=f"journal of {saga}", title_justify="left")
        for column in ("seq", "time (UTC)", "tool", "phase", "input", "payload", "hash"):
            table.add_column(column, overflow="fold", no_wrap=column in {"seq", "time (UTC)"})
        clip = (lambda s: s) if full else _clip
        dangling = {d.seq for d in verdict.dangling}
        for r in rows:
            # str(): a tampered row may hold a phase that is not one of the eight
            phase = Text(str(r.phase))
            if r.seq in dangling:
                phase.append(f" {NO_OUTCOME}", style="bold yellow")
            table.add_row(
                str(r.seq),
                r.timestamp.strftime("%Y-%m-%d %H:%M:%S.%f"),
                r.tool_name,
                phase,
                clip(r.input),
                clip(r.payload),
                r.hash if full else r.hash[:12],
            )
        # piped output would be 80 columns wide: room for a readable row instead
        console = Console(width=max(Console().width, 140))
        console.print(table)
    else:
        typer.echo(f"saga {saga} has no journal rows")
    for d in verdict.dangling:
        typer.echo(
            f"{NO_OUTCOME} seq {d.seq}: {d.tool_name} has no EXECUTED or FAILED after its INTENT: "
            "its outcome is unknown (SUSPECT until someone runs `sagacity saga resolve`, or "
            "still running)"
        )
    problem = verdict.problem
    head = f"{verdict.rows} rows, head seq {verdict.head_seq} hash {verdict.head_hash}"
    if problem is not None:
        typer.echo(
            f"chain BROKEN at seq {problem.seq}: {problem.fault.value}: {problem.detail} "
            f"(verified up to seq {verdict.head_seq})"
        )
    elif not anchored:
        typer.echo(f"chain verified ({CHAIN_ONLY}): {head}")
    elif report.ok:
        agreed = "; ".join(f"{c.source} {c.agreement} {c.detail}" for c in report.checks)
        typer.echo(f"chain and anchors verified: {head}; {agreed}")
    else:
        typer.echo(f"chain verified but an anchor disagrees: {head}")
    for check in report.faults():
        if check.source is not Source.CHAIN:
            at = f" seq {check.seq}" if check.seq is not None else ""
            typer.echo(f"ANCHOR {check.source}{at} {check.agreement}: {check.detail}")
