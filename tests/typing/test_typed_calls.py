"""mypy checks typed saga calls: a wrong argument type or an unknown keyword is an error that
names the argument, a right call none, and the result has the tool's return type."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

FIXTURE = Path(__file__).with_name("fixtures") / "typed_workflow.py"


def test_mypy_flags_exactly_the_wrong_calls(tmp_path: Path) -> None:
    # the venv's mypy, strict, in a project of the user's own: it sees Sagacity's types only
    # as an installed package that ships py.typed (the project's own run skips the fixture)
    shutil.copy(FIXTURE, tmp_path)
    run = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", FIXTURE.name],
        cwd=tmp_path,
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
    said = {lines[n - 1].split("(", 1)[1]: message for n, message in errors.items()}
    # each message names the argument: its type against the tool's, or the unknown keyword
    named = {
        'book_flight, traveler=123, day="2027-01-02")  # flagged': (
            'Argument "traveler" to "call" of "Saga" has incompatible type "int"; expected "str"'
        ),
        'book_flight, traveler="Ada", day="2027-01-02", seat="1A")  # flagged': (
            'Unexpected keyword argument "seat" for "call" of "Saga"'
        ),
        'book_flight, traveler="Ada", dya="2027-01-02")  # flagged': (
            'Unexpected keyword argument "dya" for "call" of "Saga"'
        ),
        "pick_seat, flight_id=flight.flight_id, rwo=3)  # flagged": (
            'Unexpected keyword argument "rwo" for "call_last" of "Saga"'
        ),
        'Bookings.rent_car, traveler="Ada", dayz=2)  # flagged': (
            'Unexpected keyword argument "dayz" for "call" of "Saga"'
        ),
    }
    for call, message in named.items():
        assert said[call].startswith(message), said[call]
    assert "No overload variant" not in run.stdout
