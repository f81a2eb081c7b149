"""A saga whose second call takes (or returns) a value of a given size, for the payload limit
tests; and a saga whose workflow task always fails, for the wedged-saga detection."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel
from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from sagacity.errors import PayloadTooLarge
    from sagacity.workflow import Saga, SagaResult
    from tests.temporal.sample_tools import big_report, set_flag, upload


class BigCall(BaseModel):
    flag: str
    size: int
    #: where the big value goes: the second call's argument, its result, or (after a small
    #: second call) the value the saga's body returns
    big: Literal["argument", "result", "value"] = "argument"


@workflow.defn(name="tests.BigCall")
class BigCallWorkflow:
    """``set_flag``, then the big call; then it waits for an abort (the test sends one)."""

    def __init__(self) -> None:
        self.saga = Saga()
        self._refused: str | None = None

    @workflow.run
    async def run(self, req: BigCall) -> SagaResult:
        async def body() -> str | None:
            await self.saga.call(set_flag, name=req.flag)
            if req.big == "value":
                return "v" * req.size
            try:
                if req.big == "argument":
                    await self.saga.call(upload, blob="b" * req.size)
                else:
                    await self.saga.call(big_report, size=req.size, api_token="t0ken")
            except PayloadTooLarge as exc:
                self._refused = f"{type(exc).__name__}: {exc}"
            await workflow.wait_condition(lambda: self.saga.aborted)
            return None

        return await self.saga.run(body)

    @workflow.query
    def refusal(self) -> str | None:
        return self._refused


@workflow.defn(name="tests.WedgedSaga")
class WedgedSaga:
    """A saga whose workflow task fails for ever after its first call: wedged, as a value over
    Temporal's limits left one, while its journal looks complete."""

    def __init__(self) -> None:
        self.saga = Saga()

    @workflow.run
    async def run(self, flag: str) -> SagaResult:
        async def body() -> None:
            await self.saga.call(set_flag, name=flag)
            # not a Sagacity error: Temporal fails the workflow task, and retries it
            raise RuntimeError("this workflow task always fails")

        return await self.saga.run(body)


WORKFLOWS = [BigCallWorkflow, WedgedSaga]
