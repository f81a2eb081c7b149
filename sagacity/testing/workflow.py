"""The workflow a rollback proof runs: one call of the tool under a saga, then its rollback."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sagacity.temporal.models import SagaOptions, SagaResult
    from sagacity.temporal.saga import Saga

__all__ = ["PROVE_ROLLBACK", "ROLL_BACK", "ProofRun", "ProveRollback"]

PROVE_ROLLBACK = "sagacity.testing.ProveRollback"
#: the signal that tells a proving saga whose call executed to roll back
ROLL_BACK = "sagacity.testing.roll_back"


class ProofRun(BaseModel):
    """One case's saga: the tool it calls, with which arguments, under which options."""

    tool: str
    args: dict[str, Any] = Field(default_factory=dict)
    options: SagaOptions = Field(default_factory=SagaOptions)


@workflow.defn(name=PROVE_ROLLBACK)
class ProveRollback:
    """Call the tool once; when the prover has looked at the world, abort, so the call is
    undone by the saga engine as any saga's would be."""

    @workflow.init
    def __init__(self, run: ProofRun) -> None:
        self.saga = Saga(run.options)
        self.rolling_back = False

    @workflow.signal(name=ROLL_BACK)
    def roll_back(self) -> None:
        self.rolling_back = True

    @workflow.run
    async def run(self, run: ProofRun) -> SagaResult:
        async def body() -> None:
            await self.saga.call(run.tool, **run.args)
            await workflow.wait_condition(lambda: self.rolling_back)
            self.saga.abort("the rollback prover undoes the call", by="sagacity.testing")

        return await self.saga.run(body)
