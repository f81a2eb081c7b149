"""An app that ran on Temporal before Sagacity: a workflow, its activity, and a tool it adds."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from temporalio import activity, workflow
from temporalio.exceptions import ApplicationError

from sagacity import Reversibility, compensable

#: postcards sent, by recipient (the "world" the irreversible tool changes)
SENT: dict[str, str] = {}


@activity.defn(name="host.greet")
async def greet(name: str) -> str:
    return f"hello, {name}"


@workflow.defn(name="host.Greeter")
class Greeter:
    """Greets a name, then waits for a second one to join (a signal); ``joined`` answers who.
    An empty name joining fails it."""

    def __init__(self) -> None:
        self._joined: list[str] = []

    @workflow.run
    async def run(self, name: str) -> str:
        greeting = await workflow.execute_activity(
            greet, name, start_to_close_timeout=timedelta(seconds=30)
        )
        await workflow.wait_condition(lambda: bool(self._joined))
        if not self._joined[0]:
            raise ApplicationError(f"{greeting}, and nobody", type="NobodyJoined")
        return f"{greeting} and {self._joined[0]}"

    @workflow.signal
    def join(self, name: str) -> None:
        self._joined.append(name)

    @workflow.query
    def joined(self) -> list[str]:
        return list(self._joined)


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def send_postcard(to: str, text: str) -> dict[str, Any]:
    """Irreversible: a named human approves each postcard before it is sent."""
    SENT[to] = text
    return {"sent_to": to}


@workflow.defn(name="host.Launcher")
class Launcher:
    """Starts a saga of the steps workflow as its child, under the id it is given."""

    @workflow.run
    async def run(self, child_id: str, spec: Any) -> str:
        await workflow.start_child_workflow(
            "sagacity.Steps",
            spec,
            id=child_id,
            task_queue=workflow.info().task_queue,
            parent_close_policy=workflow.ParentClosePolicy.ABANDON,
        )
        return child_id


@activity.defn(name="host.launch")
async def launch(child_id: str, spec: Any) -> str:
    """Starts a saga of the steps workflow from an activity, through the worker's client."""
    await activity.client().start_workflow(
        "sagacity.Steps", spec, id=child_id, task_queue=activity.info().task_queue
    )
    return child_id


@workflow.defn(name="host.LaunchVia")
class LaunchVia:
    """Runs :func:`launch`."""

    @workflow.run
    async def run(self, child_id: str, spec: Any) -> str:
        return await workflow.execute_activity(
            launch, args=[child_id, spec], start_to_close_timeout=timedelta(seconds=30)
        )
