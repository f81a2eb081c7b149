"""Temporal visibility: the custom search attributes a saga shows its state in.

``SagacityState`` holds the saga's :class:`~sagacity.temporal.models.SagaState` (``running``,
``awaiting_approval``, ``suspect``, ``compensating``, ``completed``, ...) and
``SagacityWaitingTool`` the tool whose call waits for a human (an IRREVERSIBLE tool at its
approval gate, or a SUSPECT call), unset otherwise. So Temporal itself answers "which sagas wait
for an approval of ``send_confirmation``"::

    temporal workflow list --query 'SagacityState="awaiting_approval" AND SagacityWaitingTool="send_confirmation"'

(with ``ExecutionStatus="Running"``: a terminated workflow keeps the last state it showed).

A namespace must have them registered: upserting an attribute it lacks fails the workflow task.
The worker checks once, when it starts (:func:`why_hidden`), and a saga upserts only when its
recorded ``open_saga`` result says the attributes were there.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta

from temporalio.api.enums.v1 import IndexedValueType
from temporalio.api.operatorservice.v1 import (
    AddSearchAttributesRequest,
    ListSearchAttributesRequest,
)
from temporalio.client import Client
from temporalio.common import SearchAttributeKey
from temporalio.service import RPCError

STATE = SearchAttributeKey.for_keyword("SagacityState")
WAITING_TOOL = SearchAttributeKey.for_keyword("SagacityWaitingTool")
KEYS = (STATE, WAITING_TOOL)
_KEYWORD = IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD


def register_commands(namespace: str) -> list[str]:
    """The Temporal CLI commands that register the attributes on ``namespace``, one each (the
    command takes one ``--type`` and registers only the first of several names)."""
    return [
        f"temporal operator search-attribute create --namespace {namespace} "
        f"--name {key.name} --type Keyword"
        for key in KEYS
    ]


def dev_server_flags() -> list[str]:
    """``temporal server start-dev`` arguments that register the attributes at start."""
    return [arg for key in KEYS for arg in ("--search-attribute", f"{key.name}=Keyword")]


async def _types(client: Client) -> dict[str, IndexedValueType.ValueType]:
    """The custom search attributes of the client's namespace, by name."""
    listed = await client.operator_service.list_search_attributes(
        ListSearchAttributesRequest(namespace=client.namespace), timeout=timedelta(seconds=10)
    )
    return dict(listed.custom_attributes)


async def why_hidden(client: Client) -> str | None:
    """Why sagas on the client's namespace cannot show their state there; None when they can."""
    try:
        types = await _types(client)
    except RPCError as exc:
        # a key without operator rights cannot list them: sagas run without
        return f"its search attributes cannot be listed: {exc}"
    missing = [k.name for k in KEYS if types.get(k.name) != _KEYWORD]
    return f"no Keyword search attribute {', '.join(missing)}" if missing else None


async def missing(client: Client) -> list[str]:
    """The attributes the client's namespace lacks, by name."""
    types = await _types(client)
    return [k.name for k in KEYS if k.name not in types]


async def add(client: Client, names: Sequence[str]) -> None:
    """Register ``names`` (of :data:`KEYS`) on the client's namespace, as Keyword attributes."""
    await client.operator_service.add_search_attributes(
        AddSearchAttributesRequest(
            search_attributes=dict.fromkeys(names, _KEYWORD), namespace=client.namespace
        ),
        timeout=timedelta(seconds=10),
    )


async def register(client: Client) -> list[str]:
    """Register the attributes the client's namespace lacks, on a server of one's own; the names.

    The dev server's ``--search-attribute`` flags register them only as it creates its state
    file: a state file from before them has to be given them.
    """
    absent = await missing(client)
    if absent:
        await add(client, absent)
    return absent
