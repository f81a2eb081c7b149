"""A plain ``pip install -e .`` of Sagacity, and of a user's app beside it, is one that mypy
follows: the app checks clean under ``mypy --strict``, and a misspelt keyword in its saga is an
error naming the keyword."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from importlib.metadata import version
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUR_PACKAGES = ("sagacity", "workflows", "workers")

APP_PYPROJECT = """\
[build-system]
requires = ["setuptools>=77"]
build-backend = "setuptools.build_meta"

[project]
name = "travelapp"
version = "0.1.0"
dependencies = ["sagacity"]
"""

APP_TOOLS = '''\
"""The app's tools."""

from pydantic import BaseModel

from sagacity import CompensationContext, compensable


class Flight(BaseModel):
    flight_id: str


def cancel_flight(ctx: CompensationContext) -> None:
    """Cancel the booked flight."""


@compensable(by=cancel_flight)
async def book_flight(traveler: str, day: str) -> Flight:
    """Book a flight."""
    return Flight(flight_id=f"{traveler}-{day}")
'''

APP_SAGA = '''\
"""The app's saga body."""

from sagacity.workflow import Saga

from travelapp.tools import book_flight


async def trip(saga: Saga) -> str:
    flight = await saga.call(book_flight, traveler="Ada", {day}="2027-01-02")
    return flight.flight_id
'''


def test_mypy_follows_a_plain_editable_install(tmp_path: Path) -> None:
    # the build backend comes from the test environment (pyproject's dev extra): no download
    assert int(version("setuptools").split(".")[0]) >= 77, "reinstall the dev extra (make test)"
    python = fresh_venv(tmp_path / "venv")
    app = tmp_path / "travelapp"
    (app / "travelapp").mkdir(parents=True)
    (app / "pyproject.toml").write_text(APP_PYPROJECT)
    (app / "travelapp" / "__init__.py").write_text('"""A user\'s app."""\n')
    (app / "travelapp" / "tools.py").write_text(APP_TOOLS)
    saga = app / "travelapp" / "saga.py"
    saga.write_text(APP_SAGA.format(day="day"))
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    for project in (ROOT, app):
        # no settings but what keeps it offline: the dependencies are there already
        installed = run(tmp_path, *pip, "--no-build-isolation", "-e", str(project))
        assert installed.returncode == 0, installed.stdout + installed.stderr

    mypy = [python, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), "-p"]
    clean = run(app, *mypy, "travelapp")
    assert clean.returncode == 0, clean.stdout + clean.stderr

    saga.write_text(APP_SAGA.format(day="dya"))
    wrong = run(app, *mypy, "travelapp")
    assert wrong.returncode == 1, wrong.stdout + wrong.stderr
    errors = [line for line in wrong.stdout.splitlines() if ": error: " in line]
    assert len(errors) == 1, wrong.stdout
    assert errors[0].startswith("travelapp/saga.py:9: error: ")
    assert 'Unexpected keyword argument "dya" for "call" of "Saga"' in errors[0]


def fresh_venv(where: Path) -> str:
    """A new venv whose only copy of Sagacity is the one installed into it: the test
    environment's other packages (the dependencies, pip, mypy) are visible to it, but not the
    directories it imports Sagacity from."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where)], check=True)
    python = str(where / "bin" / "python")
    purelib = subprocess.run(
        [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    stdlib = sysconfig.get_paths()["stdlib"]
    theirs = [
        entry
        for entry in sys.path
        if entry
        and Path(entry).is_dir()
        and not entry.startswith(stdlib)
        and not any((Path(entry) / package).exists() for package in OUR_PACKAGES)
    ]
    # "zz": site reads .pth files in name order, so pip's own __editable__ file comes first
    Path(purelib, "zz_test_environment.pth").write_text("\n".join(theirs) + "\n")
    return python


def run(cwd: Path, *command: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
