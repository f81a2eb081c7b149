"""``python -m bench.floor`` at its smallest runs end to end: a row per kind and path (with the
compensation path of the failing one), a latency row per kind, and Sagacity's distance from the
floor.

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
KINDS = [
    "plain", "journal", "heartbeat timeout", "end state", "floor", "sagacity",
    "sagacity, engine version",
]  # fmt: skip


def test_floor_prints_a_row_per_kind_and_sagacitys_distance() -> None:
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
    paths = ["all steps succeed", "last step fails"]
    assert [(row[0], row[1]) for row in throughput] == [(p, k) for p in paths for k in KINDS]
    # each kind ran its 2 sagas on each path (a saga that ended otherwise raises), and every
    # failing saga's compensation path was read
    assert {row[2] for row in throughput} == {"2"}, done.stdout
    assert all(float(row[10]) > 0 for row in throughput if row[0] == "last step fails")
    assert [row[0] for row in latency] == KINDS, done.stdout
    for path in paths:
        assert f"{path}: Sagacity / floor: throughput" in done.stdout, done.stdout


def tables(text: str) -> list[list[list[str]]]:
    """The Markdown tables in ``text``: each a list of rows (header and rule left out), each a
    list of cells."""
    found: list[list[list[str]]] = []
    rows: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip("|").split("|")])
        elif rows:
            found.append(rows[2:])
            rows = []
    return found
