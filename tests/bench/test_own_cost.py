"""``python -m bench.own_cost`` at its smallest runs end to end and measures what it says: both
kinds' calls, their rows and Sagacity's checkpoints (one signed a call, one file a saga), both
kinds' recorded sagas replayed, and the sequencer logging Sagacity's rows.

It runs the bench as a user does, in a process of its own. Nothing here times anything: the
bench reports speed, the test only that it measured each kind as described.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.bench.output import number, tables

ROOT = Path(__file__).resolve().parents[2]


def test_own_cost_measures_both_kinds_calls_and_replays() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.own_cost", "--rounds", "2", "--sagas", "2", "--replays", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    calls, replays = tables(done.stdout)
    by = {row[0]: row for row in calls}
    assert list(by) == ["floor", "sagacity"], done.stdout
    # 2 rounds of 2 sagas of 3 calls; each call wrote INTENT and its outcome
    assert {by[k][1] for k in by} == {"12"} and {number(by[k][5]) for k in by} == {2.0}
    # a checkpoint after each call (the last a seal), in one file a saga; the floor signs none
    assert number(by["sagacity"][6]) == 1.0 and number(by["sagacity"][7]) == 1.0
    assert number(by["floor"][6]) == number(by["floor"][7]) == 0.0
    assert all(number(by[k][2]) > 0 for k in by), done.stdout
    replayed = {row[0]: row for row in replays}
    assert list(replayed) == ["floor", "sagacity"], done.stdout
    assert all(number(replayed[k][1]) > 0 for k in replayed), done.stdout
    # Sagacity's saga: the floor's events, and its patch marker with the upsert it brings
    assert number(replayed["sagacity"][2]) == number(replayed["floor"][2]) + 2, done.stdout
    # the sequencer logged every row of Sagacity's sagas, in a pass that cost CPU
    passes = re.search(
        r"sequencer, a pass after each round: ([-+][\d.]+) \[[^]]*\] ms of CPU a saga "
        r"\(([\d.]+) rows logged a saga",
        done.stdout,
    )
    assert passes is not None, done.stdout
    assert float(passes.group(1)) > 0 and float(passes.group(2)) == 6.0, done.stdout
    # in all: three calls' difference, a replay's and the sequencer's, as printed
    call, replay, in_all = (
        float(re.search(pattern, done.stdout, re.S).group(1))  # type: ignore[union-attr]
        for pattern in (
            r"Sagacity - floor: ([-+][\d.]+) \[[^]]*\] ms of CPU a call",
            r"Sagacity - floor: ([-+][\d.]+) \[[^]]*\] ms of CPU a saga",
            r"In all, Sagacity's own code: ([-+][\d.]+) ms",
        )
    )
    assert abs(call * 3 + replay + float(passes.group(1)) - in_all) < 0.02, done.stdout
