"""Rolling deploy: an approvals client of this release sends what is new in a decision (a
rejection's ``message``, an approval's edited ``args``) to a saga whose worker runs the release
before (its code taken from this repository's history at :data:`OLD_RELEASE`, the shipped Order
worker, decisions signed). Each must be refused
with a typed error and recorded in the saga, which keeps waiting and takes a plain decision.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.errors import SagacityError
from sagacity.settings import Settings
from sagacity.temporal.models import SagaState
from tests.approvals import test_escalation
from tests.approvals.test_escalation import Scene, start_order
from tests.approvals.test_signed import refusals
from tests.temporal.test_crash import WorkerProcess

receiver = test_escalation.receiver
start_worker = test_escalation.start_worker
service = test_escalation.service
scene = test_escalation.scene

ROOT = Path(__file__).parents[2]
#: the last commit before decisions could carry a message or edited arguments (issue 32)
OLD_RELEASE = "f74db712e9c99a1e521674a7df4bc5d3077f99cb"


def old_code(into: Path) -> Path:
    """The release before, its ``sagacity`` and ``workers`` unpacked from git into ``into``."""
    git = shutil.which("git")
    if (
        git is None
        or subprocess.run(
            [git, "-C", str(ROOT), "cat-file", "-e", f"{OLD_RELEASE}^{{commit}}"],
            capture_output=True,
        ).returncode
    ):
        pytest.skip(f"this checkout has no commit {OLD_RELEASE[:12]} (a shallow clone?)")
    into.mkdir()
    archive = subprocess.run(
        [git, "-C", str(ROOT), "archive", OLD_RELEASE, "sagacity", "workers"],
        capture_output=True,
        check=True,
    )
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive.stdout, check=True)
    return into


@pytest.fixture
async def old_worker(
    endpoints: Endpoints, database_url: str, task_queue: str, settings: Settings, tmp_path: Path
) -> AsyncIterator[WorkerProcess]:
    code = old_code(tmp_path / "old")
    process = WorkerProcess(endpoints, database_url, task_queue, tmp_path / "old-worker.log")
    # the old release's code ahead of this tree's on the path (cwd is this tree)
    process.command = [
        sys.executable,
        "-c",
        f"import sys, runpy; sys.path.insert(0, {str(code)!r}); "
        "import sagacity; assert sagacity.__file__.startswith("
        f"{str(code)!r}), sagacity.__file__; "
        "runpy.run_module('workers.saga_worker', run_name='__main__')",
    ]
    assert settings.keyring is not None
    process.env.update(
        PYTHONPATH=str(code),
        SAGACITY_KEYRING=str(settings.keyring),
        SAGACITY_CHECKPOINT_DIR=str(tmp_path / "checkpoints"),
        SAGACITY_SIGNING_KEY=str(settings.signing_key),
        SAGACITY_LOG_INTERVAL="PT0S",
    )
    await process.start()
    yield process
    process.stop()


async def test_a_message_and_an_edit_sent_to_an_old_worker_are_refused_typed_and_recorded(
    old_worker: WorkerProcess, scene: Scene, temporal_client: Client
) -> None:
    handle, seq = await start_order(temporal_client, scene.task_queue)
    with pytest.raises(SagacityError) as rejected:
        await scene.service.reject(
            handle.id, seq, approver="alice", reason="too many", message="order one instead"
        )
    with pytest.raises(SagacityError) as edited:
        await scene.service.approve(handle.id, seq, approver="alice", args={"order_id": "o-x"})
    said = await refusals(handle, 2)
    assert "message" in said[0] and "args" in said[1], said
    for err in (rejected.value, edited.value):
        assert "message" in str(err) or "args" in str(err), err
    status = await handle.query("status")
    assert status["state"] == SagaState.AWAITING_APPROVAL.value
    assert await scene.outbox() == 0
    await scene.service.approve(handle.id, seq, approver="alice")
    assert (await handle.result()).status is SagaState.COMPLETED
    assert await scene.outbox() == 1
