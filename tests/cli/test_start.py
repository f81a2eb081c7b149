"""``sagacity saga start --workflow NAME --input JSON`` for any workflow a worker registers, and
the errors that say why a saga does not move on, against real Temporal and Postgres."""

from __future__ import annotations

import asyncio
import json
import uuid
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

from temporalio import workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals.conftest import Cli


@dataclass
class Greeting:
    name: str


@workflow.defn(name="cli-test.Greet")
class Greet:
    """An app's own workflow that is no saga: it returns a plain value."""

    @workflow.run
    async def run(self, greeting: Greeting) -> dict[str, str]:
        return {"hello": greeting.name}


@workflow.defn(name="cli-test.Idle")
class Idle:
    """An app's own workflow that runs until terminated and answers no saga query."""

    @workflow.run
    async def run(self) -> None:
        await workflow.wait_condition(lambda: False)


async def test_any_registered_workflow_starts_with_json_input_and_its_result_prints(
    cli: Cli, worker: Worker, temporal_client: Client, tmp_path: Path
) -> None:
    queue = worker.task_queue
    # the generic saga workflow, its input inline: the saga's own result
    steps = {"steps": [{"tool": "set_flag", "args": {"name": "cli"}}]}
    done = await cli(
        "saga", "start", "--workflow", STEPS_WORKFLOW, "--input", json.dumps(steps),
        "--task-queue", queue, "--wait", "--json",
    )  # fmt: skip
    assert done.code == 0, done.stderr
    assert done.json()["state"] == "completed"

    # the Order workflow, its input from a file: it stops at its approval gate
    request = tmp_path / "order.json"
    request.write_text(json.dumps({"product_id": "p-1", "quantity": 1}))
    waiting = await cli(
        "saga", "start", "--workflow", "order.PlaceOrder", "--input", f"@{request}",
        "--task-queue", queue, "--wait",
    )  # fmt: skip
    assert waiting.code == 0, waiting.stderr
    saga_id = waiting.stdout.strip()
    assert "awaiting_approval" in waiting.stderr and "send_confirmation" in waiting.stderr
    aborted = await cli("saga", "abort", saga_id, "--reason", "test done", "--wait")
    assert aborted.code == 1 and "aborted" in aborted.stdout

    # a workflow of the app's own, no saga: its value as JSON
    greeter_queue = f"greet-{uuid.uuid4().hex[:8]}"
    async with Worker(
        temporal_client,
        task_queue=greeter_queue,
        workflows=[Greet, Idle],
        workflow_runner=UnsandboxedWorkflowRunner(),
        graceful_shutdown_timeout=timedelta(seconds=1),
    ):
        greeted = await cli(
            "saga", "start", "--workflow", "cli-test.Greet", "--input", '{"name": "Zoë"}',
            "--task-queue", greeter_queue, "--wait", "--json",
        )  # fmt: skip
        assert greeted.code == 0, greeted.stderr
        assert json.loads(greeted.stdout) == {"hello": "Zoë"}
        # one still running: it is no saga, so it says so and takes no abort
        idle = await temporal_client.start_workflow(
            "cli-test.Idle", id=f"idle-{uuid.uuid4().hex[:8]}", task_queue=greeter_queue
        )
        running = await cli("saga", "status", idle.id)
        assert running.code == 0, running.stderr
        assert "running (it answers no saga status query)" in running.stdout
        refused = await cli("saga", "abort", idle.id, "--reason", "no")
        assert refused.code == 2 and "is no saga" in refused.stderr, refused.stderr
        await idle.terminate("test done")
    greeted_id = greeted.stderr.split(" as ", 1)[1].split()[0]
    shown = await cli("saga", "status", greeted_id)  # from history: no worker needed
    assert shown.code == 0, shown.stderr
    assert shown.stdout.splitlines() == [
        f"workflow {greeted_id} (cli-test.Greet): completed",
        '  result: {"hello": "Zoë"}',
    ]
    alone = await cli("saga", "start", "--input", "{}")
    assert alone.code == 2 and "--input goes with --workflow" in alone.stderr


async def test_a_saga_that_cannot_move_on_says_why_and_exits_3(
    cli: Cli, worker: Worker, temporal_client: Client
) -> None:
    queue = worker.task_queue
    nobody = f"nobody-{uuid.uuid4().hex[:8]}"
    # three sagas stuck each its own way, started at once (each command waits to see it stuck)
    bad, unknown, orphan = await asyncio.gather(
        # an input the workflow cannot decode: the workflow task fails, and the failure is shown
        cli(
            "saga", "start", "--workflow", "order.PlaceOrder", "--input", '{"quantity": "many"}',
            "--task-queue", queue, "--wait",
        ),
        # a workflow type no worker on the queue registers
        cli(
            "saga", "start", "--workflow", "travel.BookTrip", "--input", "{}",
            "--task-queue", queue, "--wait",
        ),
        # a task queue no worker polls
        cli(
            "saga", "start", "--workflow", "order.PlaceOrder", "--input", '{"quantity": 1}',
            "--task-queue", nobody, "--wait",
        ),
    )  # fmt: skip
    assert bad.code == 3, (bad.code, bad.stderr)
    assert "is failing:" in bad.stderr and "quantity" in bad.stderr
    assert "`temporal workflow terminate --workflow-id " in bad.stderr  # no saga to abort yet
    assert "Traceback" not in bad.stderr
    assert unknown.code == 3, (unknown.code, unknown.stderr)
    assert "registers workflow type 'travel.BookTrip'" in unknown.stderr
    assert orphan.code == 3, (orphan.code, orphan.stderr)
    assert f"no worker polls task queue {nobody!r}" in orphan.stderr
    saga_id = orphan.stderr.split(" as ", 1)[1].split()[0]
    status = await cli("saga", "status", saga_id)
    assert status.code == 3 and f"no worker polls task queue {nobody!r}" in status.stderr

    for run in (bad, unknown, orphan):
        saga_id = run.stderr.split(" as ", 1)[1].split()[0]
        await temporal_client.get_workflow_handle(saga_id).terminate("test done")


async def test_steps_the_worker_refuses_are_one_error_naming_each_problem(
    cli: Cli, worker: Worker, tmp_path: Path
) -> None:
    # the file is well-formed (the CLI passes it), but the worker knows no tool "set_flagg"
    steps = tmp_path / "steps.json"
    steps.write_text(
        json.dumps(
            {
                "steps": [
                    {"tool": "set_flag", "args": {"name": "cli"}},
                    {"tool": "set_flagg", "args": {"name": "typo"}},
                ]
            }
        )
    )
    refused = await cli(
        "saga", "start", "--steps", str(steps), "--task-queue", worker.task_queue, "--wait"
    )  # fmt: skip
    assert refused.code == 2, refused.stderr
    assert "Traceback" not in refused.stderr
    assert "StepsInvalid" in refused.stderr and "nothing was journaled" in refused.stderr
    assert "steps[1] ('set_flagg')" in refused.stderr and "set_flag" in refused.stderr
    # asked later, the saga says the same
    saga_id = refused.stderr.split(" as ", 1)[1].split()[0]
    again = await cli("saga", "status", saga_id)
    assert again.code == 2 and "steps[1] ('set_flagg')" in again.stderr
