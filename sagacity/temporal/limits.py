"""Temporal's size limits, and the one check every value meets before it enters a history.

Temporal refuses a payload over 2 MiB (the server's ``limit.blobSize.error``; it warns at 512
KiB) and a request over 4 MiB (gRPC's message limit). A value over them does not fail where it is
sent: the worker fails the workflow task that would record it (``PayloadsTooLarge``) and retries
that task for ever, so the saga answers nothing again. So each value is measured where it enters:

* a call's arguments, in ``saga.call`` before the call's INTENT row (and in the MCP gateway before
  its update is sent): over :data:`MAX_VALUE_BYTES`, refused with :class:`PayloadTooLarge`;
* a call's result, in the call's activity: over ``activities.MAX_RESULT_BYTES`` it stays in the
  journal and the workflow gets a reference (the call failed ``ResultTooLarge``, compensated with
  the journal's copy);
* journal rows read back when a run opens the journal: paged so one answer fits.

In workflow code a value's size is its JSON's UTF-8 length plus :data:`ENVELOPE`, room for the
request around it and the codec (AES-GCM adds 28 bytes and its metadata): the codec runs outside
the workflow. A client measures the payload the codec really produces (:func:`encoded_size`).
"""

from __future__ import annotations

from typing import Any

from temporalio.converter import DataConverter

from sagacity.errors import PayloadTooLarge

__all__ = [
    "ENVELOPE",
    "MAX_VALUE_BYTES",
    "PAYLOAD_LIMIT",
    "REQUEST_LIMIT",
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
            f"{what} take {size:,} bytes, more than Temporal's history takes in one value "
            f"({limit:,}; its payload limit is {PAYLOAD_LIMIT:,}): not run, nothing journaled. "
            "Pass a reference (an id, a URL, a path) to big data instead",
            size=size,
            limit=limit,
        )


async def encoded_size(converter: DataConverter, value: Any) -> int:
    """The bytes ``value`` takes as a payload once encoded through ``converter``'s codec."""
    payloads = await converter.encode([value])
    return sum(p.ByteSize() for p in payloads)
