"""mypy checks typed saga calls: a wrong argument type or an unknown keyword is an error, a
right call none, and the result has the tool's return type."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).with_name("fixtures") / "typed_workflow.py"
ROOT = Path(__file__).parents[2]


def test_mypy_flags_exactly_the_wrong_calls() -> None:
    # the venv's mypy, strict, with the project's settings; the project's own run skips the
    # fixture (mypy's packages are sagacity, workflows and workers)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", str(FIXTURE)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    errors = {
        int(m["line"]): m["message"]
        for m in re.finditer(r"^[^:\n]+:(?P<line>\d+): error: (?P<message>.*)$", run.stdout, re.M)
    }
    lines = FIXTURE.read_text().splitlines()
    flagged = {n for n, line in enumerate(lines, 1) if line.endswith("# flagged")}
    assert set(errors) == flagged, run.stdout + run.stderr
    wrong_type = min(flagged)
    # mypy names the argument types it saw: the int given for the traveler's str
    assert 'No overload variant of "call" of "Saga"' in errors[wrong_type]
    assert '"int", "str"' in errors[wrong_type]
