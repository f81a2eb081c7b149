"""Determinism: every recorded saga history replays against today's workflow code.

``histories/`` holds one history per path a saga can take (completed, compensated, approved,
rejected, timed out, SUSPECT resolved either way, aborted, cancelled, reset, continued as new,
agent sagas, refused signals, ...), recorded from real runs by ``record_histories.py``, and
histories recorded by earlier versions of the code (``generic_completed.json`` and
``place_order_compensated.json`` predate the ``sagacity-open-saga`` patch). Each is replayed as
every worker that runs its workflow type would replay it (``replay.py``). No server is needed.
``histories/known_nondeterministic/`` holds histories that expose engine bugs: expected to fail.

A failure names the history file: the change under test would break sagas that are running
now. docs/versioning.md says what to do (a ``workflow.patched`` branch), and how to record a new
path.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity.temporal.workflow import LEGACY_STEPS_WORKFLOW, STEPS_WORKFLOW
from tests.temporal.record_histories import PATHS, files_of
from tests.temporal.replay import (
    KNOWN_NONDETERMINISTIC,
    PATCHED,
    ReplayFailed,
    history_files,
    load,
    patches_in,
    replay,
    workflow_type,
)


@pytest.mark.parametrize("path", history_files(), ids=lambda p: p.name)
async def test_recorded_history_replays(path: Path) -> None:
    try:
        await replay(load(path), path.name)
    except ReplayFailed as exc:
        pytest.fail(str(exc), pytrace=False)


def test_every_path_of_the_recorder_is_in_the_corpus() -> None:
    missing = [name for name in PATHS if not files_of(name, None)]
    assert not missing, (
        f"paths with no recorded history: {', '.join(missing)}; record them with "
        f"`python -m tests.temporal.record_histories --only NAME` and commit the files"
    )


def test_the_steps_workflow_replays_under_its_type_and_its_former_one() -> None:
    """Sagas started as ``sagacity.Saga`` before the rename run on its deprecated alias."""
    types = {workflow_type(load(path)) for path in history_files()}
    assert {STEPS_WORKFLOW, LEGACY_STEPS_WORKFLOW} <= types


@pytest.mark.parametrize("patch", PATCHED)
def test_sagas_from_before_and_after_each_patch_replay(patch: str) -> None:
    taken = {path.name: patch in patches_in(path) for path in history_files()}
    assert any(taken.values()), f"no history in the corpus took the new branch of {patch!r}"
    assert not all(taken.values()), (
        f"no history in the corpus predates {patch!r}: keep the ones recorded before it until "
        "the patch is deprecated (docs/versioning.md)"
    )


@pytest.mark.parametrize(
    "path", sorted(KNOWN_NONDETERMINISTIC.glob("*.json")), ids=lambda p: p.name
)
@pytest.mark.xfail(raises=ReplayFailed, reason="a known engine bug (see the recorder path)")
async def test_known_nondeterministic_history(path: Path) -> None:
    """Histories a live worker wrote and today's code cannot replay: engine bugs, kept as proof.

    ``order_approved_with_its_gate.json`` (recorder path of that name): an ``approve`` sent the
    moment the ``status`` query shows the gate shares a workflow task with open_approval's
    result; the live worker, its cache advanced by the query, takes it; a worker replaying the
    history applies the signal first and refuses it. Once the engine takes such a decision,
    this XPASSes: move the file into histories/ and drop ``nondeterministic=True`` from its
    recorder path.
    """
    await replay(load(path), path.name)
