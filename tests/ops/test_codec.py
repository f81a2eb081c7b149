"""Secrets out of Temporal history: a tool argument is encrypted by the payload codec on its way
into history, read back through the codec server by an authorized principal only, and never
printed by the ``sagacity worker`` process (a real process, its log captured), nor by Temporal's
SDK at DEBUG through the worker's log handler."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.observability import configure_logging
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals.conftest import codec_server
from tests.ops.conftest import Cli, stack_env
from tests.ops.conftest import WorkerProcess as SagacityWorker
from tests.temporal.conftest import phases
from tests.temporal.test_crash import WorkerProcess

TEMPORAL = str(Path(sys.executable).parent / "temporal")
SECRET = f"s3cr3t-{uuid.uuid4().hex}"


def payload_texts(history: Any) -> list[str]:
    """Every payload ``data`` in a history's JSON, decoded from base64 as it would be read."""
    found: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, item in node.items():
                if key == "data" and isinstance(item, str):
                    found.append(base64.b64decode(item).decode(errors="replace"))
                else:
                    walk(item)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    walk(history)
    return found


async def workflow_show(
    endpoints: Endpoints, saga_id: str, *codec: str
) -> subprocess.CompletedProcess[str]:
    args = [
        TEMPORAL, "workflow", "show", "--output", "json", "--workflow-id", saga_id,
        "--address", endpoints.temporal_address, "--namespace", endpoints.temporal_namespace,
        *codec,
    ]  # fmt: skip
    return await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, timeout=60)


async def test_a_secret_tool_argument_is_in_no_history_or_worker_log_and_decodes_for_alice_only(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    tmp_path: Path,
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    settings: Settings,
    sagacity: Cli,
) -> None:
    # `sagacity worker` in a process of its own, with the session's codec keys as a deployment
    # has them (the environment), serving tools that take a secret and fail
    assert settings.payload_codec() is not None
    worker = WorkerProcess(
        endpoints,
        database_url,
        task_queue,
        tmp_path / "worker.log",
        apps=("tests.temporal.sample_tools",),
    )
    worker.env["PYTHONPATH"] = str(Path(__file__).parents[2])  # the tools live in tests/
    await worker.start()
    try:
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[
                    Step(tool="send_note", args={"text": SECRET}),
                    Step(tool="explode", args={"reason": "the relay refused"}),
                ],
                options=SagaOptions(compensation_backoff_s=0.1),
            ),
            id=f"codec-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SagaResult,
        )
        result = await asyncio.wait_for(handle.result(), 60)
    finally:
        worker.stop()

    # the saga ran, compensated both calls, and its journal verifies
    assert result.status is SagaState.COMPENSATED, result
    rows = await phases(journal, handle.id)
    assert ("send_note", "COMPENSATED") in rows and ("explode", "COMPENSATED") in rows, rows
    verified = await sagacity("verify", handle.id)
    assert verified.code == 0, verified.stderr

    # nowhere in the history the plain `temporal` CLI prints: not as text, not inside a payload
    shown = await workflow_show(endpoints, handle.id)
    assert shown.returncode == 0, shown.stderr
    history = json.loads(shown.stdout)
    texts = payload_texts(history)
    assert texts and SECRET not in shown.stdout and not any(SECRET in t for t in texts)
    # every payload Sagacity wrote is encrypted; what is left clear is Temporal's bookkeeping
    # (a patch marker and its search attribute, a local activity's marker: ids and times; the
    # saga's state and the tool it waits on, which visibility indexes: docs/operations.md)
    clear = {
        (event["eventType"], base64.b64decode(p["data"]).decode())
        for event in history["events"]
        for p in _payloads(event)
        if base64.b64decode(p["metadata"]["encoding"]) != b"binary/encrypted"
    }
    assert {kind for kind, _ in clear} <= {
        "EVENT_TYPE_MARKER_RECORDED",
        "EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES",
    }, clear
    assert len(texts) > 2 * len(clear)

    # nor in the worker's log, which shows it ran the calls
    log = worker.log.read_text(errors="replace")
    assert "payload codec on: encrypting with key session" in log and SECRET not in log
    assert base64.b64encode(SECRET.encode()).decode()[:40] not in log

    async with codec_server(temporal_client, approvals) as url:
        # the same CLI, pointed at the codec server with alice's token, shows the argument
        decoded = await workflow_show(
            endpoints,
            handle.id,
            "--codec-endpoint",
            f"{url}/codec",
            "--codec-auth",
            "Bearer tok-alice",
        )
        assert decoded.returncode == 0, decoded.stderr
        assert any(SECRET in t for t in payload_texts(json.loads(decoded.stdout)))

        # bob is authenticated but may not decode; no token is no answer at all
        sealed = {"payloads": [p for event in history["events"] for p in _payloads(event)][:3]}
        async with httpx.AsyncClient(base_url=url) as http:
            alice = await http.post("/codec/decode", json=sealed, headers=_auth("tok-alice"))
            bob = await http.post("/codec/decode", json=sealed, headers=_auth("tok-bob"))
            nobody = await http.post("/codec/decode", json=sealed)
            forged = await http.post("/codec/decode", json=sealed, headers=_auth("tok-carol"))
        assert alice.status_code == 200
        assert any(SECRET in t for t in payload_texts(alice.json())), alice.text
        assert (bob.status_code, bob.json()["error"]) == (403, "decode_not_allowed")
        assert (nobody.status_code, nobody.json()["error"]) == (401, "unauthorized")
        assert forged.status_code == 401
        assert SECRET not in bob.text + nobody.text + forged.text


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "X-Namespace": "default"}


def _payloads(node: Any) -> list[dict[str, Any]]:
    """Every payload object (a dict with ``metadata`` and ``data``) inside ``node``."""
    if isinstance(node, dict):
        if "metadata" in node and "data" in node:
            return [node]
        return [p for item in node.values() for p in _payloads(item)]
    if isinstance(node, list):
        return [p for item in node for p in _payloads(item)]
    return []


def test_temporal_debug_lines_keep_their_words_but_not_their_payloads(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # what temporalio logs at DEBUG when an activity heartbeats and completes: the details in
    # clear, the completion as a protobuf message
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    try:
        configure_logging("text", logging.DEBUG)
        sdk = logging.getLogger("temporalio.worker._activity")
        sdk.debug("Recording heartbeat with details %s", ({"api_key": SECRET},))
        sdk.debug("Completing activity with completion: %s", Payload(data=SECRET.encode()))
        sdk.debug("Running activity %s (token %s)", "call_tool", 7)
    finally:
        root.handlers, root.level = saved
    printed = capsys.readouterr().err
    assert "Recording heartbeat with details <tuple>" in printed
    assert "Completing activity with completion: <Payload>" in printed
    assert "Running activity call_tool (token 7)" in printed
    assert SECRET not in printed


async def test_a_worker_without_codec_keys_says_so_and_production_refuses_it(
    endpoints: Endpoints, database_url: str, task_queue: str, tmp_path: Path, settings: Settings
) -> None:
    env = {
        k: v
        for k, v in stack_env(endpoints, database_url, task_queue).items()
        if not k.startswith("SAGACITY_CODEC_KEYS")
    }
    dev = await SagacityWorker(env, tmp_path / "dev.log").start()
    try:
        assert "PAYLOADS IN CLEAR (dev mode)" in dev.text()
    finally:
        dev.stop()
    # a keyring, as production requires: the codec keys are all it lacks
    production_env = {
        **env,
        "SAGACITY_PRODUCTION": "true",
        "SAGACITY_KEYRING": str(settings.keyring),
    }
    production = SagacityWorker(production_env, tmp_path / "prod.log")
    with pytest.raises(RuntimeError, match="worker exited early") as refused:
        await production.start()
    assert "refusing to start" in str(refused.value) and "SAGACITY_CODEC_KEYS" in str(refused.value)
