"""``python -m bench.floor`` at its smallest runs end to end: a row per kind, and Sagacity's
distance from the floor.

It runs the bench as a user does, in a process of its own (the embedded stack or the session's
Postgres, a `sagacity witness` process). Nothing here times anything: the bench reports speed,
the test only that every kind ran its sagas to completion.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_floor_prints_a_row_per_kind_and_sagacitys_distance() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [sys.executable, "-m", "bench.floor", "--rounds", "1", "--sagas", "2", "--concurrency", "2"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    kinds = [
        line.split("|")[1].strip()
        for line in done.stdout.splitlines()
        if line.startswith("| ") and "sagas/s" not in line
    ]
    assert kinds == [
        "plain", "journal", "heartbeat timeout", "end state", "floor", "sagacity",
        "sagacity, engine version",
    ], done.stdout  # fmt: skip
    # each kind ran its 2 sagas: none failed or ended otherwise (the bench raises then)
    assert all(
        line.split("|")[2].strip() == "2"
        for line in done.stdout.splitlines()
        if line.startswith("| ") and "sagas/s" not in line
    ), done.stdout
    assert "Sagacity / floor: throughput" in done.stdout, done.stdout
