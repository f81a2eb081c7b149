"""Everything a saga workflow and the client that starts it import, from one place.

In a workflow, with the tools declared (``@compensable``) in their own module::

    from sagacity.workflow import Saga, SagaOptions, SagaResult
    flight = await saga.call(book_flight, traveler="Ada", day="2027-01-02")  # -> Flight

:class:`Saga` is the engine a ``@workflow.defn`` class builds in its ``@workflow.init`` and
runs its body with (``await saga.run(body)``); ``saga.call`` takes the tool itself (arguments
checked by mypy, the result of the tool's return type) or its name. :class:`StepsWorkflow`
(Temporal type :data:`STEPS_WORKFLOW`) runs a :class:`SagaSpec`'s steps without any workflow
code. A body may catch the errors below. Clients send the saga's signals with :class:`Approve`,
:class:`Reject`, :class:`Abort`, :class:`Resolve` and :class:`Resume`, its ``decide`` update
with :class:`Decision`.
"""

from sagacity.errors import (
    ApprovalRejected,
    PayloadTooLarge,
    SagaAborted,
    SagaCancelled,
    SagacityError,
    ToolArgumentsInvalid,
    ToolFailed,
)
from sagacity.temporal.models import (
    ENGINE_VERSION,
    Abort,
    Approve,
    Decision,
    Reject,
    Resolve,
    Resume,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.saga import Saga
from sagacity.temporal.workflow import STEPS_WORKFLOW, StepsWorkflow

__all__ = [
    "ENGINE_VERSION",
    "STEPS_WORKFLOW",
    "Abort",
    "ApprovalRejected",
    "Approve",
    "Decision",
    "PayloadTooLarge",
    "Reject",
    "Resolve",
    "Resume",
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
