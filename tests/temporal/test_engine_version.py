"""A spec's engine version: a client sends it only when told to (once every worker knows it),
what an older one recorded does not carry it, and the replay corpus holds the histories both
kinds of worker can leave.

A saga whose spec carries ``engine_version`` opens its journal without a patch marker; one an
older worker ran first (it ignores the field) has the marker, which a replay must consume.
"""

from __future__ import annotations

import json

from sagacity.temporal.codec import data_converter
from sagacity.temporal.models import Head, SagaCarry, SagaProgress, SagaSpec, Step
from sagacity.workflow import ENGINE_VERSION
from tests.temporal.replay import HISTORIES, load, patch_markers

CONVERTER = data_converter(None).payload_converter


def started_with(name: str) -> SagaSpec:
    """The spec a recorded saga was started with, decoded as a worker decodes it."""
    started = load(HISTORIES / name).events[0].workflow_execution_started_event_attributes
    (spec,) = CONVERTER.from_payloads(started.input.payloads, [SagaSpec])
    assert isinstance(spec, SagaSpec)
    return spec


def on_the_wire(spec: SagaSpec) -> object:
    return json.loads(CONVERTER.to_payloads([spec])[0].data).get("engine_version")


def test_a_spec_carries_the_engine_version_only_when_its_client_sets_it() -> None:
    """Left out, the saga opens with patch markers, which a worker of the release before reads:
    a rolling deploy can hand it to one of those."""
    spec = SagaSpec(steps=[Step(tool="set_flag", args={"name": "a"})])
    assert on_the_wire(spec) is None
    versioned = spec.model_copy(update={"engine_version": ENGINE_VERSION})
    assert on_the_wire(versioned) == ENGINE_VERSION


def test_a_spec_recorded_before_the_engine_version_decodes_without_it() -> None:
    assert started_with("saga_completed@open-in-call.json").engine_version is None


def test_a_run_continued_as_new_keeps_its_first_runs_version() -> None:
    progress = SagaProgress(
        next_step=1, results={}, shown={}, carry=SagaCarry(saga_id="s", head=Head())
    )
    old = started_with("saga_completed@open-in-call.json")
    assert on_the_wire(old.model_copy(update={"progress": progress})) is None
    new = started_with("saga_completed@engine-version.json")
    assert on_the_wire(new.model_copy(update={"progress": progress})) == ENGINE_VERSION


def test_the_corpus_holds_a_versioned_saga_run_by_either_release() -> None:
    """Recorded without a marker (a worker that knows the version), and with one (an older
    worker that ignored it): test_replay.py replays both."""
    for name, markers in [
        ("saga_completed@engine-version.json", {}),
        ("saga_compensated@engine-version.json", {}),
        ("saga_completed@older-worker.json", {"sagacity-open-in-first-call": False}),
        ("saga_compensated@older-worker.json", {"sagacity-open-in-first-call": False}),
    ]:
        assert started_with(name).engine_version == ENGINE_VERSION, name
        assert patch_markers(HISTORIES / name) == markers, name
