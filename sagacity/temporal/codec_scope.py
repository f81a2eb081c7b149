"""Which payloads the codec leaves clear: a host app's own workflows', so its plain clients read them.

A worker that serves Sagacity beside workflows of the app's own shares one data converter with
them. Sealing everything broke the app's clients that have no codec (``KeyError:
'binary/encrypted'`` on a result). So a payload a worker of this process writes (Temporal's
serialization context names its workflow run, or its activity's workflow type) is left clear
when, and only when, it positively belongs to a *host* run:

- a run of a workflow type the app registered on a worker of this process itself
  (``Worker(workflows=[...])``): not one given to
  :class:`~sagacity.temporal.plugin.SagacityPlugin`, not named ``sagacity.…``, not seen
  making a ``Saga`` or scheduling a Sagacity activity (a workflow that uses a ``Saga`` is
  Sagacity's for the process from the moment it makes one, before anything it writes);
- started by no workflow, or by a host run this process serves (a saga's children are the saga's);
- its own payloads (result, query and update answers, memo, failure details), and its
  activities' inputs, results and heartbeats, but those of activities named ``sagacity.…`` (an
  activity whose run this process does not hold goes by its workflow type alone).

Everything else is sealed as before: whatever a client call of this process writes (only the
worker's own workflow tasks consult the runs, so a workflow id a saga reuses after a host run
never inherits its clearance there, nor from an activity), a child a host run starts of a type
that is not a host type, a run the process does not hold, an activity of a workflow type
that is not a host type here, a saga's child's input. Decoding is unchanged (the codec opens what
is sealed and reads what is clear), so recorded histories replay as before.
"""

from __future__ import annotations

import copy
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextvars import ContextVar
from typing import Any, Self
from weakref import WeakValueDictionary

from temporalio import activity, workflow
from temporalio.api.common.v1 import Payload
from temporalio.converter import (
    ActivitySerializationContext,
    PayloadCodec,
    SerializationContext,
    WithSerializationContext,
    WorkflowSerializationContext,
)
from temporalio.worker import (
    HandleUpdateInput,
    Interceptor,
    StartActivityInput,
    StartChildWorkflowInput,
    StartLocalActivityInput,
    Worker,
    WorkflowInboundInterceptor,
    WorkflowInterceptorClassInput,
    WorkflowOutboundInterceptor,
)

from sagacity.temporal.codec import CLEAR, ClearText

__all__ = ["CodecScope", "ScopedCodec", "claim_run", "host_types", "leaves_clear", "serving"]

#: the prefix of every workflow and activity type Sagacity defines
_SAGACITY = "sagacity."
#: what the ``decide`` update answers: nothing secret, so sent clear (see :class:`_Run`)
_DECISIONS = frozenset({"approved", "rejected"})

#: set in the tasks a worker of this process runs; a client call elsewhere is always sealed
_serving: ContextVar[bool] = ContextVar("sagacity_codec_serving", default=False)
_host_types: set[str] = set()
_sagacity_types: set[str] = set()
#: the runs this process's workers hold, by (namespace, workflow id), while they hold them
_runs: WeakValueDictionary[tuple[str, str], _Run | _Sealed] = WeakValueDictionary()


def host_types(types: Iterable[str], *, claimed: Iterable[str]) -> None:
    """Record workflow types a worker of this process serves for the app: ``types`` less
    ``claimed`` (Sagacity's); a type once claimed stays Sagacity's."""
    _sagacity_types.update(claimed)
    _host_types.update(t for t in types if not t.startswith(_SAGACITY))


def _is_host_type(workflow_type: str) -> bool:
    return workflow_type in _host_types and workflow_type not in _sagacity_types


def leaves_clear(context: SerializationContext) -> bool:
    """Whether payloads written in ``context`` belong to a host run (see the module's docstring)."""
    # a worker serving no workflow of the app's own (``sagacity worker``) seals everything:
    # no run can be a host run, so no lookup is made for each payload's context
    if not _host_types or not _serving.get():
        return False
    if isinstance(context, WorkflowSerializationContext):
        if activity.in_activity():
            # an activity's client call: its target's id may name an ended host run still held
            return False
        run = _runs.get((context.namespace, context.workflow_id))
        return run is not None and run.host
    if isinstance(context, ActivitySerializationContext):
        if context.activity_type is None or context.activity_type.startswith(_SAGACITY):
            return False
        run = _runs.get((context.namespace, context.workflow_id or ""))
        if run is not None and run.workflow_type == context.workflow_type:
            return run.host
        return context.workflow_type is not None and _is_host_type(context.workflow_type)
    return False


class ScopedCodec(PayloadCodec, WithSerializationContext):
    """``codec``, leaving clear what :func:`leaves_clear` says and what is marked
    :data:`~sagacity.temporal.codec.CLEAR`; decoding is ``codec``'s."""

    def __init__(self, codec: PayloadCodec, *, clear: bool = False) -> None:
        self.codec = codec
        self._clear = clear

    def with_context(self, context: SerializationContext) -> Self:
        clear = leaves_clear(context)
        if clear == self._clear:
            return self
        scoped = copy.copy(self)
        scoped._clear = clear
        return scoped

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """Each payload sealed by ``codec``, but those left clear."""
        if self._clear:
            return list(payloads)
        sealing = [p for p in payloads if CLEAR not in p.metadata]
        if len(sealing) == len(payloads):
            return await self.codec.encode(payloads)
        sealed = iter(await self.codec.encode(sealing))
        return [p if CLEAR in p.metadata else next(sealed) for p in payloads]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        """What ``codec`` decodes (a clear payload it reads as it is)."""
        return await self.codec.decode(payloads)


async def serving(worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
    """Run ``worker`` (``next``) with its tasks marked as a worker's."""
    token = _serving.set(True)
    try:
        await next(worker)
    finally:
        _serving.reset(token)


def claim_run() -> None:
    """The current workflow run makes a ``Saga``: it and its type are Sagacity's from now on,
    before anything it answers or writes (a continued saga's status, before its next call)."""
    info = workflow.info()
    run = _runs.get((info.namespace, info.workflow_id))
    if isinstance(run, _Run):
        run.claim()


class CodecScope(Interceptor):
    """Tracks the runs a worker holds, and whether each is a host run."""

    def workflow_interceptor_class(
        self, input: WorkflowInterceptorClassInput
    ) -> type[WorkflowInboundInterceptor] | None:
        return _Run


class _Sealed:
    """Stands, in :data:`_runs`, for a saga a host run starts as its child, until it runs here."""

    host = False
    workflow_type = ""


class _Run(WorkflowInboundInterceptor):
    """One run as the codec sees it. Also sends the ``decide`` update's answer clear: it says
    only "approved" or "rejected", and a caller without the codec (the plain ``temporal`` CLI)
    then reads the answer to an update that was applied either way."""

    host = False

    def init(self, outbound: WorkflowOutboundInterceptor) -> None:
        info = outbound.info()
        parent = info.parent
        self.namespace, self.workflow_type = info.namespace, info.workflow_type
        started_by = None if parent is None else _runs.get((parent.namespace, parent.workflow_id))
        self.host = _is_host_type(info.workflow_type) and (
            parent is None or (started_by is not None and started_by.host)
        )
        #: the sagas this run started as children (held so their stand-ins stay in _runs)
        self.children: list[_Sealed] = []
        _runs[(info.namespace, info.workflow_id)] = self
        super().init(_Outbound(outbound, self))

    def join_saga(self, activity_type: str) -> None:
        """A Sagacity activity scheduled: this run, and its type, are Sagacity's from now on."""
        if activity_type.startswith(_SAGACITY):
            self.claim()

    def claim(self) -> None:
        """This run, and its type, are Sagacity's from now on."""
        self.host = False
        _sagacity_types.add(self.workflow_type)

    async def handle_update_handler(self, input: HandleUpdateInput) -> Any:
        answer = await super().handle_update_handler(input)
        if input.update == "decide" and isinstance(answer, str) and answer in _DECISIONS:
            return ClearText(answer)
        return answer


class _Outbound(WorkflowOutboundInterceptor):
    def __init__(self, next: WorkflowOutboundInterceptor, run: _Run) -> None:
        super().__init__(next)
        self._run = run

    def start_activity(self, input: StartActivityInput) -> workflow.ActivityHandle[Any]:
        self._run.join_saga(input.activity)
        return super().start_activity(input)

    def start_local_activity(self, input: StartLocalActivityInput) -> workflow.ActivityHandle[Any]:
        self._run.join_saga(input.activity)
        return super().start_local_activity(input)

    async def start_child_workflow(
        self, input: StartChildWorkflowInput
    ) -> workflow.ChildWorkflowHandle[Any, Any]:
        # the child's input is sealed, even where its id names an ended host run, when the
        # child is a saga's or is a saga itself
        if not self._run.host:
            _runs[(self._run.namespace, input.id)] = self._run
        elif not _is_host_type(input.workflow):
            self._run.children.append(sealed := _Sealed())
            _runs[(self._run.namespace, input.id)] = sealed
        return await super().start_child_workflow(input)
