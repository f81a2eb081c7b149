"""Reading a saga's Temporal history as someone holding the payload codec's keys would."""

from __future__ import annotations

from google.protobuf.message import Message
from temporalio.api.common.v1 import Payload
from temporalio.client import WorkflowHistory
from temporalio.converter import PayloadCodec


def payloads_in(message: Message) -> list[Payload]:
    """Every payload anywhere inside ``message``: inputs, results, failures, markers, memos."""
    if isinstance(message, Payload):
        return [message]
    found: list[Payload] = []
    for field, value in message.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        if isinstance(value, Message):
            items = [value]
        elif field.message_type is not None and field.message_type.GetOptions().map_entry:
            items = [v for v in value.values() if isinstance(v, Message)]
        else:
            items = list(value)
        for item in items:
            found.extend(payloads_in(item))
    return found


async def decrypted(history: WorkflowHistory, codec: PayloadCodec | None) -> WorkflowHistory:
    """``history`` with every payload decoded by ``codec`` in place (failure messages included,
    which the codec's failure converter keeps in an encoded attribute)."""
    if codec is not None:
        for event in history.events:
            for payload in payloads_in(event):
                payload.CopyFrom((await codec.decode([payload]))[0])
    return history
