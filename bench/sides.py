"""The two sides a benchmark compares, each set up as its users run it, and one saga of either.

Sagacity runs as a new user's worker does: the head each journal activity leaves signed into a
checkpoint directory (the end sealed), the transparency log's sequencer integrating rows beside
the worker and asking a witness process to cosign each head, every payload encrypted by the
codec, decisions checked against a keyring. :class:`Anchors` keeps that key material in one
folder, so that worker processes of one run share it as a deployment's workers share their
settings. Plain Temporal runs as it comes: its own client (the default converter, no codec) and a
worker of plain activities (:mod:`bench.overhead_workload`, :mod:`bench.plain_workflow`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import sys
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any
from uuid import uuid4

import httpx
from psycopg.conninfo import conninfo_to_dict
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from bench._support import CpuMeter
from bench.overhead_workload import PLAIN_ACTIVITIES, TOOLS, saga_spec
from bench.plain_workflow import NAME as PLAIN_WORKFLOW
from bench.plain_workflow import PlainThreeSteps
from sagacity.devkeys import ensure_dev_approvers
from sagacity.devwitness import log_key
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Keyring, load_keyring
from sagacity.evidence.keys import generate_key, load_private_key
from sagacity.evidence.tlog import run_sequencer
from sagacity.evidence.trust import TrustedWitness
from sagacity.evidence.witness import DEFAULT_NAME, witness_key
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore, open_pool
from sagacity.temporal.codec import AesGcmCodec, new_codec_key, parse_keys
from sagacity.temporal.models import SagaResult, SagaState
from sagacity.temporal.plugin import SagacityPlugin, sandbox
from sagacity.temporal.workflow import STEPS_WORKFLOW

SAGACITY = "sagacity"
PLAIN = "plain"
KINDS = (PLAIN, SAGACITY)

#: how often the sequencer integrates (SAGACITY_LOG_INTERVAL's default)
SEQUENCER_EVERY_S = 10.0


@dataclass(frozen=True)
class Anchors:
    """Sagacity's key material in one folder: the checkpoint signing key and directory, the
    codec key, the decision keyring, the witness's key. :meth:`create` makes them; any process
    given the folder reads the same ones."""

    folder: Path

    @classmethod
    def create(cls, folder: Path) -> Anchors:
        anchors = cls(folder)
        folder.mkdir(parents=True, exist_ok=True)
        generate_key(anchors.signing_key)
        anchors.codec_file.write_text(new_codec_key("bench"), encoding="utf-8")
        ensure_dev_approvers(folder, user="bench")
        witness_key(anchors.witness_folder)
        return anchors

    @property
    def signing_key(self) -> Path:
        return self.folder / "signing.pem"

    @property
    def checkpoint_dir(self) -> Path:
        return self.folder / "checkpoints"

    @property
    def codec_file(self) -> Path:
        return self.folder / "codec.key"

    @property
    def witness_folder(self) -> Path:
        return self.folder / "witness"

    @cached_property
    def codec(self) -> AesGcmCodec:
        return AesGcmCodec(parse_keys(self.codec_file.read_text(encoding="utf-8")))

    def checkpoints(self) -> CheckpointWriter:
        return CheckpointWriter(self.checkpoint_dir, load_private_key(self.signing_key))

    def keyring(self) -> Keyring:
        approvers, _ = ensure_dev_approvers(self.folder, user="bench")
        return load_keyring(approvers.keyring)

    def witness(self, url: str) -> TrustedWitness:
        """The witness serving at ``url``, as a trust file names it."""
        return TrustedWitness(DEFAULT_NAME, witness_key(self.witness_folder).public_key(), url)


@contextlib.asynccontextmanager
async def witness_process(anchors: Anchors, database_url: str) -> AsyncIterator[str]:
    """A `sagacity witness` process witnessing the database's log, started and ready; its URL."""
    database = str(conninfo_to_dict(database_url)["dbname"])
    log = log_key(database, load_private_key(anchors.signing_key).public_key())
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    process = await asyncio.create_subprocess_exec(
        str(Path(sys.executable).with_name("sagacity")), "witness",
        "--folder", str(anchors.witness_folder), "--listen", f"127.0.0.1:{port}",
        "--log", log.vkey(),
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient() as http:
            for _ in range(200):
                with contextlib.suppress(httpx.TransportError):
                    await http.get(f"{url}/checkpoint", params={"origin": log.name})
                    break
                await asyncio.sleep(0.05)
            else:
                raise RuntimeError("the bench's witness did not start")
        yield url
    finally:
        process.terminate()
        await process.wait()


@contextlib.asynccontextmanager
async def sagacity_plugin(
    settings: Settings,
    database_url: str,
    anchors: Anchors | None,
    witnesses: Sequence[TrustedWitness] = (),
) -> AsyncIterator[tuple[SagacityPlugin, JournalStore]]:
    """A worker's plugin on a journal pool of its own, and its journal; with ``anchors``, the
    transparency log's sequencer beside it, asking ``witnesses`` to cosign. ``anchors`` None:
    the journal alone (no checkpoints, codec, keyring or sequencer)."""
    pool = await open_pool(
        database_url, min_size=settings.pool_min_size, max_size=settings.pool_max_size
    )
    journal = JournalStore(pool)
    try:
        plugin = SagacityPlugin(
            journal=journal,
            approvals=ApprovalStore(pool),
            tools=TOOLS,
            checkpoints=None if anchors is None else anchors.checkpoints(),
            codec=None if anchors is None else anchors.codec,
            keyring=None if anchors is None else anchors.keyring(),
        )
        async with _sequencer(database_url, anchors, witnesses):
            yield plugin, journal
    finally:
        await journal.close()
        await pool.close()


@contextlib.asynccontextmanager
async def _sequencer(
    database_url: str, anchors: Anchors | None, witnesses: Sequence[TrustedWitness]
) -> AsyncIterator[None]:
    """The sequencer a worker runs beside its tool calls, on a pool of its own (the workers of
    a deployment each run one; they take turns under an advisory lock); none without anchors."""
    task = asyncio.create_task(
        run_sequencer(
            database_url,
            None if anchors is None else anchors.checkpoint_dir,
            None if anchors is None else anchors.signing_key,
            every=SEQUENCER_EVERY_S,
            witnesses=witnesses,
        )
    )
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


def sagacity_worker(
    client: Client, task_queue: str, settings: Settings, *, sandboxed: bool = False
) -> Worker:
    """A worker of the client's plugin: the generic saga workflow, its activities, the tools.

    It runs outside the workflow sandbox, as it ships; ``sandboxed``: inside, as a workflow of
    your own that uses ``Saga`` runs by default.
    """
    return Worker(
        client,
        task_queue=task_queue,
        max_concurrent_activities=settings.max_concurrent_activities,
        # the runner of workflows defined sandboxed=False (Sagacity's generic one); Temporal's
        # default unless asked
        unsandboxed_workflow_runner=sandbox(None) if sandboxed else UnsandboxedWorkflowRunner(),
    )


def plain_worker(client: Client, task_queue: str, settings: Settings) -> Worker:
    """The baseline's worker: the plain workflow (in the sandbox, Temporal's default) and its
    plain activities."""
    return Worker(
        client,
        task_queue=task_queue,
        workflows=[PlainThreeSteps],
        activities=PLAIN_ACTIVITIES,
        max_concurrent_activities=settings.max_concurrent_activities,
    )


def task_queues() -> dict[str, str]:
    """A fresh task queue per kind."""
    return {kind: f"bench-{kind}-{uuid4().hex[:8]}" for kind in KINDS}


@dataclass(frozen=True)
class Rig:
    """Where each kind's sagas are started (its own client and task queue), and who measures."""

    clients: dict[str, Client]
    task_queues: dict[str, str]
    meter: CpuMeter


async def execute(
    rig: Rig, kind: str, *, fail_last: bool, engine_version: int | None = None
) -> str:
    """Run one saga of ``kind`` to its end; returns its workflow id. Raises on a wrong outcome.

    ``engine_version``: a Sagacity saga's spec's (None: not set, as by default).
    """
    wid = f"bench-{kind}-{uuid4().hex[:12]}"
    client, task_queue = rig.clients[kind], rig.task_queues[kind]
    if kind == SAGACITY:
        result: SagaResult = await client.execute_workflow(
            STEPS_WORKFLOW,
            saga_spec(fail_last=fail_last, engine_version=engine_version),
            id=wid,
            task_queue=task_queue,
            result_type=SagaResult,
        )
        status = result.status.value
        expected = SagaState.COMPENSATED.value if fail_last else SagaState.COMPLETED.value
    else:
        plain: dict[str, Any] = await client.execute_workflow(
            PLAIN_WORKFLOW, fail_last, id=wid, task_queue=task_queue, result_type=dict
        )
        status = str(plain["status"])
        expected = "compensated" if fail_last else "completed"
    if status != expected:
        raise RuntimeError(f"{wid} ended {status}, expected {expected}")
    return wid
