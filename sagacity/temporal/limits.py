"""Temporal's size limits, and the one check every value meets before it enters a history.

Temporal refuses a payload over 2 MiB (the server's ``limit.blobSize.error``; it warns at 512
KiB) and a request over 4 MiB (gRPC's message limit). A value over them does not fail where it is
sent: the worker fails the workflow task that would record it (``PayloadsTooLarge``) and retries
that task for ever, so the saga answers nothing again. So each value is measured where it enters:

* a call's arguments, in ``saga.call`` before the call's INTENT row (and in the MCP gateway before
  its update is sent): over :data:`MAX_VALUE_BYTES`, refused with :class:`PayloadTooLarge`;
* a call's result, in the call's activity: over ``activities.outcomes.MAX_RESULT_BYTES`` it stays
  in the journal and the workflow gets a reference (the call failed ``ResultTooLarge``,
  compensated with the journal's copy);
* an update's or a signal's arguments, in every client of :class:`SizeLimits` (the plugin adds
  it): Temporal takes an update of any size, and the workflow task that would accept it fails;
* a model's reply in an agent saga, in its activity (refused, not retried);
* the value a saga's body returns, in ``saga.run`` (left out of the result, and said);
* journal rows a run reads back (``open_saga``: a reset, a catch-up), paged so each answer fits;
* a call's outcome in its activity's heartbeat details, left out when too large.

In workflow code a value's size is its JSON's UTF-8 length plus :data:`ENVELOPE`, room for the
request around it and the codec (AES-GCM adds 28 bytes and its metadata): the codec runs outside
the workflow. A client measures the payload the codec really produces (:func:`encoded_size`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from temporalio.client import (
    Interceptor,
    OutboundInterceptor,
    SignalWorkflowInput,
    StartWorkflowUpdateInput,
    StartWorkflowUpdateWithStartInput,
    WorkflowUpdateHandle,
)
from temporalio.converter import DataConverter

from sagacity.errors import PayloadTooLarge

__all__ = [
    "ENVELOPE",
    "MAX_VALUE_BYTES",
    "PAYLOAD_LIMIT",
    "REQUEST_LIMIT",
    "SizeLimits",
    "check",
    "encoded_size",
    "json_size",
]

#: Temporal's default limit on one payload (``limit.blobSize.error``)
PAYLOAD_LIMIT = 2 * 1024 * 1024
#: gRPC's default limit on one request: a workflow task's whole completion must fit in it
REQUEST_LIMIT = 4 * 1024 * 1024
#: room under :data:`PAYLOAD_LIMIT` for what surrounds a value (the request's other fields, the
#: payload's metadata, the codec's nonce, tag and key id)
ENVELOPE = 64 * 1024
#: the largest value (JSON bytes) one payload may carry. Half of :data:`REQUEST_LIMIT` less the
#: envelope as well: a value can enter a workflow task's completion twice (an MCP call's update
#: and the activity that runs it), and both must fit in one request
MAX_VALUE_BYTES = min(PAYLOAD_LIMIT, REQUEST_LIMIT // 2) - ENVELOPE


def json_size(text: str) -> int:
    """``text``'s UTF-8 length, counted only when it could matter (at most 4 bytes a char)."""
    if len(text) * 4 <= MAX_VALUE_BYTES:
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def check(what: str, size: int, *, limit: int = MAX_VALUE_BYTES) -> None:
    """Refuse a value of ``size`` bytes over ``limit``: :class:`PayloadTooLarge`, naming ``what``."""
    if size > limit:
        raise PayloadTooLarge(
            f"{what}: {size:,} bytes, more than Temporal's history takes in one value "
            f"({limit:,}; its payload limit is {PAYLOAD_LIMIT:,}), refused before anything was "
            "sent, run or journaled. Pass a reference (an id, a URL, a path) to big data instead",
            size=size,
            limit=limit,
        )


async def encoded_size(converter: DataConverter, *values: Any) -> int:
    """The bytes ``values`` take as payloads once encoded through ``converter``'s codec."""
    return sum(p.ByteSize() for p in await converter.encode(values))


class SizeLimits(Interceptor):
    """Refuses, before it is sent, an update or a signal whose arguments are too large for a
    workflow's history (:class:`PayloadTooLarge`); measured through ``converter``, the client's
    own, codec included."""

    def __init__(self, converter: DataConverter) -> None:
        self.converter = converter

    def intercept_client(self, next: OutboundInterceptor) -> OutboundInterceptor:
        return _Outbound(next, self.converter)


class _Outbound(OutboundInterceptor):
    def __init__(self, next: OutboundInterceptor, converter: DataConverter) -> None:
        super().__init__(next)
        self._converter = converter

    async def _check(self, what: str, args: Sequence[Any]) -> None:
        if args:
            check(what, await encoded_size(self._converter, *args))

    async def start_workflow_update(
        self, input: StartWorkflowUpdateInput
    ) -> WorkflowUpdateHandle[Any]:
        await self._check(f"the arguments of update {input.update!r} to {input.id}", input.args)
        return await super().start_workflow_update(input)

    async def start_update_with_start_workflow(
        self, input: StartWorkflowUpdateWithStartInput
    ) -> WorkflowUpdateHandle[Any]:
        update = input.update_workflow_input
        await self._check(f"the arguments of update {update.update!r}", update.args)
        return await super().start_update_with_start_workflow(input)

    async def signal_workflow(self, input: SignalWorkflowInput) -> None:
        await self._check(f"the arguments of signal {input.signal!r} to {input.id}", input.args)
        await super().signal_workflow(input)
