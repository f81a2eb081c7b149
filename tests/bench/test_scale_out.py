"""``python -m bench.scale_out`` at its smallest runs end to end: a row per kind, and the plot.

It runs the bench as a user does, in a process of its own (its worker processes, its Temporal
dev server with a database file, a scratch database on the session's Postgres or the embedded
one). Nothing here times anything: the bench reports speed, the test only that it ran.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_scale_out_prints_a_row_per_kind_and_writes_the_plot(tmp_path: Path) -> None:
    png = tmp_path / "scale.png"
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    done = subprocess.run(
        [
            sys.executable, "-m", "bench.scale_out", "--workers", "1", "--in-flight", "2",
            "--seconds", "1", "--warmup", "0.5", "--plot", str(png),
        ],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [line for line in done.stdout.splitlines() if line.startswith("| 1 ")]
    assert [row.split("|")[3].strip() for row in rows] == ["plain", "sagacity"], done.stdout
    assert png.stat().st_size > 0
