"""Every decision recorded (issue 28): what a signal or the ``decide`` update carries is applied or
refused and recorded in ``refused_decisions``, whatever it holds.

Bad payloads go to an Order saga waiting at its gate, through each of its signals (``approve``,
``reject``, ``abort``, ``halt``, ``resume``, ``resolve``) and the ``decide`` update, as raw
payloads (:class:`~temporalio.common.RawValue`) a client of another language could send: JSON
nested 10,000 deep, a lone surrogate, bytes that are not UTF-8, an encoding no converter knows,
fields of the wrong type, an unknown field, and a payload the codec cannot open. Each is refused
with its reason, the ``decide`` caller gets a typed refusal it must not retry, and the saga is
still waiting: approved, it completes. The data converter once failed before the saga's handlers
ran on the first four: a signal was dropped with a line in the worker's log, an update answered
with a retryable ``RuntimeError``; a payload the codec could not open failed every workflow task.

Also pinned: a saga that continues as new keeps how it was aborted (by a signal, whose sender is
checked, or by a Temporal cancel), which the next run reports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from temporalio import workflow
from temporalio.api.common.v1 import Payload
from temporalio.client import Client, WorkflowHandle, WorkflowUpdateFailedError
from temporalio.common import RawValue
from temporalio.converter import PayloadCodec
from temporalio.exceptions import ApplicationError
from temporalio.service import RPCError

from sagacity.evidence.decisions import load_keyring
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.codec import ENCODING, KEY_ID, AesGcmCodec
from sagacity.temporal.models import (
    Abort,
    Approve,
    SagaCarry,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
)
from sagacity.temporal.saga import Saga
from tests.approvals.conftest import StartOrder, Waiting
from tests.temporal import sample_tools
from tests.temporal.conftest import serving, wait_for
from workflows.order.shop import Shop

SIGNALS = ("approve", "reject", "abort", "halt", "resume", "resolve")


def well_formed(name: str, seq: int) -> dict[str, Any]:
    """A payload ``name`` takes (not one that decides: each test spoils it)."""
    payloads: dict[str, dict[str, Any]] = {
        "approve": {"journal_seq": seq, "approver": "eve"},
        "reject": {"journal_seq": seq, "approver": "eve"},
        "decide": {"journal_seq": seq, "approver": "eve", "approve": True},
        "abort": {"reason": "stop", "by": "eve"},
        "halt": {"halt_id": 1, "policy": "compensate", "operator": "eve"},
        "resume": {"halt_id": 1, "operator": "eve"},
        "resolve": {"call_seq": seq, "resolver": "eve", "happened": False},
    }
    return payloads[name]


def raw(data: bytes, encoding: bytes = b"json/plain") -> RawValue:
    return RawValue(Payload(metadata={"encoding": encoding}, data=data))


def as_json(value: Any) -> RawValue:
    return raw(json.dumps(value).encode())


def spliced(name: str, seq: int, value: bytes) -> RawValue:
    """``name``'s well-formed payload with ``value`` (raw JSON text) for its first field."""
    fields = well_formed(name, seq)
    first = next(iter(fields))
    rest = b"".join(
        b"," + json.dumps(k).encode() + b":" + json.dumps(v).encode()
        for k, v in fields.items()
        if k != first
    )
    return raw(b"{" + json.dumps(first).encode() + b":" + value + rest + b"}")


def wrong_types(name: str, seq: int) -> RawValue:
    fields = well_formed(name, seq)
    return as_json({k: [v] if isinstance(v, str) else str(v) for k, v in fields.items()})


#: each bad payload, built for a signal or update name and the gate's seq
CASES: dict[str, Callable[[str, int], RawValue]] = {
    "10k-deep JSON": lambda name, seq: spliced(name, seq, b"[" * 10_000 + b"]" * 10_000),
    "lone surrogate": lambda name, seq: spliced(name, seq, b'"\\udc00x"'),
    "invalid UTF-8": lambda name, seq: spliced(name, seq, b'"\xff\xfe"'),
    "unknown encoding": lambda name, seq: raw(
        json.dumps(well_formed(name, seq)).encode(), b"text/x-sagacity-unknown"
    ),
    "wrong types": wrong_types,
    "unknown field": lambda name, seq: as_json({**well_formed(name, seq), "approved_by": "x"}),
}

#: what the refusal says, per case: the reason, not only that it was refused
REASONS = {
    "10k-deep JSON": "cannot be decoded",
    "lone surrogate": "cannot be decoded",
    "invalid UTF-8": "cannot be decoded",
    "unknown encoding": "cannot be decoded",
    "wrong types": "malformed",
    "unknown field": "approved_by",
}


async def refused_typed(handle: WorkflowHandle[Any, Any], payload: RawValue) -> ApplicationError:
    """Send ``decide`` with ``payload``: it must fail typed, not to be retried."""
    with pytest.raises(WorkflowUpdateFailedError) as refused:
        await handle.execute_update("decide", payload, result_type=str)
    cause = refused.value.cause
    assert isinstance(cause, ApplicationError), repr(cause)
    assert cause.type == "ApprovalRefused" and cause.non_retryable, (cause.type, cause.message)
    assert cause.details == ("invalid",), cause.details
    return cause


async def still_decidable(waiting: Waiting) -> None:
    """The saga waits at its gate as before, and a good approval completes it."""
    status = await waiting.handle.query("status", result_type=SagaStatus)
    assert status.state is SagaState.AWAITING_APPROVAL, status.state
    await waiting.handle.signal("approve", Approve(journal_seq=waiting.seq, approver="alice"))
    result = await waiting.handle.result()
    assert result.status is SagaState.COMPLETED, result


@pytest.mark.parametrize("case", list(CASES))
async def test_a_malformed_decision_is_refused_recorded_and_the_saga_goes_on(
    case: str, start_order: StartOrder
) -> None:
    waiting = await start_order()
    handle, seq = waiting.handle, waiting.seq
    try:
        for name in SIGNALS:
            await handle.signal(name, CASES[case](name, seq))
        cause = await refused_typed(handle, CASES[case]("decide", seq))
        assert REASONS[case] in cause.message, cause.message

        expected = len(SIGNALS) + 1
        status = await wait_for(handle, lambda s: len(s.refused_decisions) >= expected)
        refused = status.refused_decisions
        assert len(refused) == expected, refused
        # in the order sent, each naming what it refused and why
        for name, refusal in zip(SIGNALS, refused, strict=False):
            assert f"malformed {name!r} signal" in refusal and REASONS[case] in refusal, refusal
        assert "malformed decision" in refused[-1] and REASONS[case] in refused[-1], refused[-1]
        await still_decidable(waiting)
    finally:
        with contextlib.suppress(RPCError):  # a wedged saga would retry its task for ever
            await handle.terminate("test over")


async def test_a_refused_decide_update_is_recorded_with_its_sender(
    start_order: StartOrder,
) -> None:
    waiting = await start_order()
    handle = waiting.handle
    cause = await refused_typed(
        handle, as_json({"journal_seq": waiting.seq, "approver": "eve", "approve": "yes"})
    )
    assert "approve" in cause.message
    # a well-formed decision that cannot be taken is refused, and recorded, too
    with pytest.raises(WorkflowUpdateFailedError) as unknown:
        await handle.execute_update(
            "decide", {"journal_seq": 99, "approver": "eve", "approve": True}, result_type=str
        )
    stale = unknown.value.cause
    assert isinstance(stale, ApplicationError) and stale.non_retryable
    assert stale.type == "ApprovalRefused" and stale.details == ("unknown_seq",)
    status = await wait_for(handle, lambda s: len(s.refused_decisions) >= 2)
    assert status.refused_decisions[0].startswith("eve: malformed decision")
    assert status.refused_decisions[1].startswith("eve: no request awaits a decision at seq 99")
    await still_decidable(waiting)


class PassSealed(PayloadCodec):
    """``codec``, except that a payload already sealed is sent as it is."""

    def __init__(self, codec: PayloadCodec) -> None:
        self.codec = codec

    async def encode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return [
            p if p.metadata.get("encoding") == ENCODING else (await self.codec.encode([p]))[0]
            for p in payloads
        ]

    async def decode(self, payloads: Sequence[Payload]) -> list[Payload]:
        return await self.codec.decode(payloads)


async def test_a_decision_the_codec_cannot_open_is_refused_and_recorded(
    temporal_client: Client, start_order: StartOrder
) -> None:
    codec = temporal_client.data_converter.payload_codec
    assert isinstance(codec, AesGcmCodec), "the test session runs with the codec on"
    # sealed as if by the codec, but by someone who holds no key: the codec passes it on as it is
    sender = Client(
        temporal_client.service_client,
        namespace=temporal_client.namespace,
        data_converter=dataclasses.replace(
            temporal_client.data_converter, payload_codec=PassSealed(codec)
        ),
    )
    sealed = Payload(
        metadata={"encoding": ENCODING, KEY_ID: codec.key_ids[0].encode()}, data=os.urandom(64)
    )
    waiting = await start_order()
    handle = sender.get_workflow_handle(waiting.saga_id)
    try:
        for name in SIGNALS:
            await handle.signal(name, RawValue(sealed))
        cause = await refused_typed(handle, RawValue(sealed))
        assert "does not decrypt" in cause.message, cause.message
        status = await wait_for(
            waiting.handle, lambda s: len(s.refused_decisions) >= len(SIGNALS) + 1
        )
        assert all("does not decrypt" in r for r in status.refused_decisions), status
        await still_decidable(waiting)
    finally:
        with contextlib.suppress(RPCError):
            await waiting.handle.terminate("test over")


async def test_a_signal_the_saga_does_not_take_is_recorded(start_order: StartOrder) -> None:
    # a misspelt decision is not lost in silence
    waiting = await start_order()
    await waiting.handle.signal("aprove", {"journal_seq": waiting.seq, "approver": "alice"})
    status = await wait_for(waiting.handle, lambda s: bool(s.refused_decisions))
    assert status.refused_decisions == ["?: unknown signal 'aprove'"]
    await still_decidable(waiting)


# -- continue-as-new keeps how the saga was aborted ------------------------------------------


@workflow.defn(name="tests.AbortCarried", sandboxed=False)
class AbortCarried:
    """Sets a flag, then waits until aborted (``flags`` calls more before) and continues as new;
    the next run's call meets the carried abort. Returns the result and ``saga.cancelled``."""

    @workflow.init
    def __init__(self, flags: int, carry: SagaCarry | None = None) -> None:
        self.saga = Saga(SagaOptions(continue_as_new_events=50), carry=carry)

    @workflow.run
    async def run(self, flags: int, carry: SagaCarry | None = None) -> tuple[SagaResult, bool]:
        saga = self.saga

        def go_on(carry: SagaCarry) -> None:
            workflow.continue_as_new(args=[flags, carry])

        async def body() -> None:
            if carry is None:
                for index in range(flags):
                    await saga.call("set_flag", name=f"flag-{index}")
                await workflow.wait_condition(lambda: saga.aborted)
                go_on(saga.carry())
            await saga.call("set_flag", name="after")

        return await saga.run(body, continue_as_new=go_on), saga.cancelled


async def test_a_signalled_abort_carried_by_continue_as_new_is_still_checked(
    temporal_client: Client,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    settings: Settings,
) -> None:
    assert settings.keyring is not None
    task_queue = f"carry-{uuid.uuid4().hex[:8]}"
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=sample_tools.TOOLS,
        workflows=[AbortCarried],
        keyring=load_keyring(settings.keyring),
    ):
        handle = await temporal_client.start_workflow(
            AbortCarried.run, args=[1, None], id=task_queue, task_queue=task_queue
        )
        await wait_for(handle, lambda s: s.head.seq >= 2)  # the flag is set
        # unsigned: the worker's keyring cannot prove mallory sent it
        await handle.signal("abort", Abort(reason="stop", by="mallory"))
        result, cancelled = await handle.result()
    assert result.status is SagaState.ABORTED and not cancelled
    assert result.error is not None and result.error.type == "SagaAborted"
    # the next run names the sender as the first would have: not proven
    assert "aborted by unverified:mallory" in result.error.message, result.error


async def test_a_cancel_carried_by_continue_as_new_is_still_a_cancel(
    temporal_client: Client, journal: JournalStore, approvals: ApprovalStore, shop: Shop
) -> None:
    task_queue = f"carry-{uuid.uuid4().hex[:8]}"
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=sample_tools.TOOLS,
        workflows=[AbortCarried],
    ):
        # enough calls that compensating them continues as new (history over 50 events)
        handle = await temporal_client.start_workflow(
            AbortCarried.run, args=[8, None], id=task_queue, task_queue=task_queue
        )
        await wait_for(handle, lambda s: s.head.seq >= 16)  # the eight flags are set
        await handle.cancel()
        result, cancelled = await handle.result()
        latest = await temporal_client.get_workflow_handle(task_queue).describe()
    assert latest.run_id != handle.result_run_id, "the compensation did not continue as new"
    assert result.status is SagaState.ABORTED and len(result.compensated) > 0
    assert result.error is not None and result.error.type == "SagaCancelled"
    assert cancelled, "the run that finished the compensation forgot the cancel"
