"""``python -m bench.floor`` at its smallest runs end to end and measures what it says: a row
per kind and path, the floor's kinds journaling the rows their sagas make and the plain ones
none, every failing saga's compensation path read, a latency row per kind, Sagacity's distance
from the floor, and a lone commit's cost.

It runs the bench as a user does, in a process of its own (the embedded stack or the session's
Postgres, a `sagacity witness` process). Nothing here times anything: the bench reports speed,
the test only that it measured each kind as described.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.bench.output import number, tables

ROOT = Path(__file__).resolve().parents[2]
KINDS = [
    "plain", "plain, unsandboxed", "journal", "floor", "sagacity", "sagacity, engine version"
]  # fmt: skip
PATHS = ["all steps succeed", "last step fails"]
#: rows a saga journals: INTENT and outcome of 3 steps; failing, 3 INTENTs, 2 EXECUTED, 1
#: FAILED and 2 COMPENSATED
ROWS = {"all steps succeed": 6.0, "last step fails": 8.0}


def test_floor_measures_each_kind_as_it_says() -> None:
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "bench.floor", "--rounds", "1", "--sagas", "2",
            "--concurrency", "2", "--sequential", "1",
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    throughput, latency = tables(done.stdout)
    assert [(r[0], r[1]) for r in throughput] == [(p, k) for p in PATHS for k in KINDS]
    by = {(r[0], r[1]): r for r in throughput}
    for path in PATHS:
        # each kind ran its 2 sagas (a saga that ended otherwise raises)
        assert {by[path, k][2] for k in KINDS} == {"2"}, done.stdout
        assert number(by[path, "journal"][3]) == number(by[path, "floor"][3]) == ROWS[path]
        assert number(by[path, "plain"][3]) == number(by[path, "plain, unsandboxed"][3]) == 0
        assert f"{path}: Sagacity / floor: throughput" in done.stdout, done.stdout
    assert all(number(by["last step fails", k][11]) > 0 for k in KINDS), done.stdout
    assert [r[0] for r in latency] == KINDS, done.stdout
    assert "A durable single-row commit on its own" in done.stdout, done.stdout
