"""``saga start``: start a saga from an Order, a steps file or any workflow's JSON input.

Prints the saga id on stdout (so ``SAGA=$(sagacity saga start …)`` works) and its progress on
stderr. Input is checked whole before anything starts (a steps file's fields, its names, and
that each ``$ref`` names an earlier step): bad input is one line, exit 2.
"""

from __future__ import annotations

import getpass
import uuid
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ValidationError
from temporalio.common import WorkflowIDReusePolicy
from temporalio.exceptions import WorkflowAlreadyStartedError

from sagacity.cli._exit import hard_exit
from sagacity.cli.saga.found import report
from sagacity.cli.saga.shared import (
    ID_MAX,
    AsJson,
    Usage,
    Wait,
    connected,
    read_settings,
    run,
)
from sagacity.cli.saga.status import settle
from sagacity.errors import InvalidInput
from sagacity.inputs import check_name, invalid, load_json
from sagacity.temporal.models import SagaOptions, SagaSpec, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from workflows.order.workflows import OrderRequest, order_steps

ORDER_WORKFLOW = "order.PlaceOrder"
#: a steps file larger than this is refused (Temporal refuses workflow inputs over 2 MB)
MAX_STEPS_FILE = 1024 * 1024


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
    starter: Annotated[
        str | None,
        typer.Option(
            "--as",
            help="Who starts it (default: your user name): a tool whose approval policy "
            "forbids the starter refuses this principal's approval.",
            show_default=False,
        ),
    ] = None,
    wait: Wait = False,
    as_json: AsJson = False,
) -> None:
    """Start a saga and print its id; with --wait, follow it until it ends or awaits a human."""

    async def work() -> int:
        settings = read_settings(task_queue=task_queue)
        if given is not None and workflow is None:
            raise Usage("--input goes with --workflow NAME: the workflow type it is the input of")
        name = workflow or (STEPS_WORKFLOW if steps is not None else ORDER_WORKFLOW)
        # the deadline setting is the default for sagas started here; a steps file may override
        options = SagaOptions(
            approval_deadline_s=settings.approval_deadline.total_seconds(),
            started_by=starter or getpass.getuser(),
        )
        argument = _input(name, steps, order, given, options)
        if saga_id is not None:
            check_name(saga_id, what="--id", max_len=ID_MAX)
        sid = saga_id or f"{'order' if order else 'saga'}-{uuid.uuid4().hex[:8]}"
        async with connected(settings) as client:
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
                raise Usage(
                    f"a saga with id {sid!r} already exists (one id names one journal)"
                ) from None
            typer.echo(f"started {name} as {sid} on task queue {settings.task_queue}", err=True)
            if not wait:
                typer.echo(sid)
                return 0
            settled = await settle(client, handle)
            if not as_json:
                typer.echo(sid)
            return report(settled, as_json=as_json, quiet=True)

    run(work())


def _input(
    workflow: str, steps: Path | None, order: str | None, given: str | None, options: SagaOptions
) -> Any:
    """The workflow's argument from ``--input``, ``--steps`` or ``--order``; ``options`` unless
    the steps file has its own."""
    if [steps, order, given].count(None) != 2:
        raise Usage(
            "give one of --steps FILE.json or --order PRODUCT:QUANTITY, "
            "or --workflow NAME --input JSON"
        )
    if given is not None:
        return _json_input(given)
    if steps is not None:
        if workflow != STEPS_WORKFLOW:
            raise Usage(f"--steps runs the generic {STEPS_WORKFLOW} workflow, not {workflow}")
        return _steps(steps, options)
    assert order is not None
    product, _, quantity = order.partition(":")
    if not product or not quantity.isdigit() or int(quantity) < 1:
        raise Usage(f"--order expects PRODUCT:QUANTITY, e.g. p-1:2; got {order!r}")
    if workflow == STEPS_WORKFLOW:
        return order_steps(product, int(quantity), options)
    if workflow == ORDER_WORKFLOW:
        return OrderRequest(product_id=product, quantity=int(quantity), options=options)
    raise Usage(f"--order starts {ORDER_WORKFLOW} or {STEPS_WORKFLOW}, not {workflow}")


def _read(path: Path, *, what: str) -> bytes:
    """A JSON input file's bytes, refused over :data:`MAX_STEPS_FILE` or unreadable (exit 2)."""
    try:
        with path.open("rb") as file:
            data = file.read(MAX_STEPS_FILE + 1)
    except OSError as exc:
        raise Usage(f"{what}: {exc.strerror or exc}") from None
    if len(data) > MAX_STEPS_FILE:
        raise Usage(f"{what}: the file is over {MAX_STEPS_FILE // 1024} KiB")
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
    if spec.options.started_by is None:
        # a file's own options leave out who starts it: whoever runs the command
        spec.options.started_by = options.started_by
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
