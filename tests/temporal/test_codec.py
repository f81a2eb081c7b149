"""The payload codec against real Temporal: key rotation, and a key the worker lacks.

A saga started under key A waits at its approval gate; a worker holding only key B cannot read
its history, so its workflow task fails, loudly, naming A, and nothing is journaled; the worker
restarted with keys [B, A] takes it from there, and the saga completes.
"""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import timedelta

import pytest
from temporalio.api.common.v1 import Payload
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity.errors import CodecKeyMissing, PayloadUnreadable
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.codec import (
    KEY_ID,
    AesGcmCodec,
    CodecKey,
    PayloadConverter,
    data_converter,
    parse_keys,
    unreadable,
)
from sagacity.temporal.models import Approve, SagaResult, SagaState, SagaStatus
from sagacity.temporal.plugin import SagacityPlugin
from tests.temporal.conftest import awaiting_approval, phases, wait_for
from tests.temporal.history import payloads_in
from workflows.order import app as order_app
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

KEY_A = CodecKey("key-a", os.urandom(32))
KEY_B = CodecKey("key-b", os.urandom(32))


def client_with(client: Client, keys: Sequence[CodecKey]) -> Client:
    config = client.config()
    config["data_converter"] = data_converter(AesGcmCodec(keys))
    return Client(**config)


class Workers:
    def __init__(
        self,
        client: Client,
        task_queue: str,
        journal: JournalStore,
        approvals: ApprovalStore,
        checkpoints: CheckpointWriter,
    ) -> None:
        self.client, self.task_queue = client, task_queue
        self.journal, self.approvals, self.checkpoints = journal, approvals, checkpoints

    @asynccontextmanager
    async def holding(self, *keys: CodecKey) -> AsyncIterator[Client]:
        """A worker whose codec holds ``keys`` (the first encrypts), and a client like it."""
        plugin = SagacityPlugin(
            journal=self.journal,
            approvals=self.approvals,
            tools=order_app.TOOLS,
            workflows=order_app.WORKFLOWS,
            checkpoints=self.checkpoints,
            codec=AesGcmCodec(keys),
        )
        client = client_with(self.client, keys)
        worker = Worker(
            client,
            task_queue=self.task_queue,
            plugins=[plugin],
            graceful_shutdown_timeout=timedelta(seconds=1),
        )
        async with worker:
            yield client


@pytest.fixture
def workers(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    shop: Shop,
    checkpoint_writer: CheckpointWriter,
) -> Workers:
    return Workers(temporal_client, task_queue, journal, approvals, checkpoint_writer)


async def test_a_saga_started_under_key_a_waits_out_a_worker_without_a_and_completes_after_rotation(
    workers: Workers, journal: JournalStore, caplog: pytest.LogCaptureFixture
) -> None:
    saga_id = f"rotate-{uuid.uuid4().hex[:8]}"
    async with workers.holding(KEY_A) as client:
        handle = await client.start_workflow(
            "order.PlaceOrder",
            OrderRequest(),
            id=saga_id,
            task_queue=workers.task_queue,
            result_type=SagaResult,
        )
        waiting = await wait_for(handle, awaiting_approval)
    assert waiting.pending_approval is not None
    rows = await phases(journal, saga_id)

    # rotated without keeping A: the decision arrives, the history cannot be read
    async with workers.holding(KEY_B) as client:
        handle = client.get_workflow_handle(saga_id, result_type=SagaResult)
        await handle.signal(
            "approve",
            Approve(journal_seq=waiting.pending_approval.journal_seq, approver="alice"),
        )
        failures: list[logging.LogRecord] = []
        failed_task = False
        for _ in range(600):
            failures = [
                r
                for r in caplog.records
                if r.exc_info and isinstance(r.exc_info[1], CodecKeyMissing)
            ]
            events = (await handle.fetch_history()).events
            failed_task = any(
                e.event_type is EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED for e in events
            )
            if failures and failed_task:
                break
            await asyncio.sleep(0.05)
    # visible twice over: the worker's log names the key, the history shows the failed task
    assert failures and failed_task
    raised = failures[0].exc_info
    assert raised is not None
    assert "'key-a'" in str(raised[1]) and "key-b" in str(raised[1])
    assert await phases(journal, saga_id) == rows  # nothing ran, nothing journaled

    # B encrypts, A still decrypts: the saga takes its approval and completes
    async with workers.holding(KEY_B, KEY_A) as client:
        handle = client.get_workflow_handle(saga_id, result_type=SagaResult)
        result = await asyncio.wait_for(handle.result(), 60)
        status = await handle.query("status", result_type=SagaStatus)
    assert result.status is SagaState.COMPLETED and status.state is SagaState.COMPLETED
    assert (await phases(journal, saga_id))[-1] == ("send_confirmation", "EXECUTED")
    key_ids = {
        p.metadata[KEY_ID]
        for e in (await handle.fetch_history()).events
        for p in payloads_in(e)
        if KEY_ID in p.metadata
    }
    assert key_ids == {b"key-a", b"key-b"}


async def test_keys_rotate_and_tampering_is_refused() -> None:
    (old,) = parse_keys("old=" + "A" * 43 + "=")
    sealed = await AesGcmCodec([old]).encode(
        [Payload(metadata={"encoding": b"json/plain"}, data=b"1")]
    )
    rotated = AesGcmCodec([KEY_B, old])
    assert (await rotated.decode(sealed))[0].data == b"1"
    clear = Payload(metadata={"encoding": b"json/plain"}, data=b"2")
    assert await rotated.decode([clear]) == [clear]  # histories written before the codec was on
    with pytest.raises(CodecKeyMissing, match="'old'"):
        await AesGcmCodec([KEY_B]).decode(sealed)
    flipped = Payload()
    flipped.CopyFrom(sealed[0])
    flipped.data = flipped.data[:-1] + bytes([flipped.data[-1] ^ 1])
    relabelled = Payload()
    relabelled.CopyFrom(sealed[0])
    relabelled.metadata[KEY_ID] = b"key-b"
    for bad in (flipped, relabelled):
        # handed on marked, so that a saga can refuse a decision that carries it; read, it raises
        (marked,) = await rotated.decode([bad])
        assert "does not decrypt" in (unreadable(marked) or "")
        with pytest.raises(PayloadUnreadable, match="does not decrypt"):
            PayloadConverter().from_payloads([marked])
    for text in (
        "a",
        "a=",
        "a=not base64!",
        "a=" + "A" * 20,
        "a=" + "A" * 43 + "=,a=" + "A" * 43 + "=",
    ):
        with pytest.raises(ValueError) as refused:
            parse_keys(text)
        assert "AAAA" not in str(refused.value)
    assert repr(KEY_A) == "CodecKey(id='key-a')"  # a key never shows in a repr
