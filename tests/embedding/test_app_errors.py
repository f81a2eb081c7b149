"""``sagacity worker --app``: an app that cannot be served says why and what to do, no traceback.

Each app is a module written into a fresh folder the command runs from, as a new user's is.
The database and Temporal addresses lead nowhere: every refusal comes before either is used.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from contextlib import AsyncExitStack
from pathlib import Path

import pytest

from sagacity.errors import SettingsError
from sagacity.settings import Settings
from sagacity.worker import load_apps

SAGACITY = str(Path(sys.executable).parent / "sagacity")

TOOL = """
from sagacity import CompensationContext, compensable

@compensable(by="cancel_hotel")
def book_hotel(city: str) -> str:
    return city

def cancel_hotel(ctx: CompensationContext) -> None:
    pass

TOOLS = [book_hotel]
"""


def run_worker(folder: Path, app: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "SAGACITY_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/nowhere",
        "TEMPORAL_ADDRESS": "127.0.0.1:1",
    }
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        [SAGACITY, "worker", "--app", app],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def refused(result: subprocess.CompletedProcess[str]) -> str:
    """The one-line error of a refused start, checked for its exit code and no traceback."""
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    return result.stderr


def test_a_missing_app_names_the_module_the_folder_and_pythonpath(tmp_path: Path) -> None:
    message = refused(run_worker(tmp_path, "travel_app"))

    assert "app module 'travel_app' not found" in message
    assert f"current directory ({tmp_path})" in message and "PYTHONPATH (unset)" in message


def test_an_app_whose_own_import_fails_shows_the_inner_error(tmp_path: Path) -> None:
    (tmp_path / "travel_app.py").write_text("import flight_sdk_not_installed\n" + TOOL)

    message = refused(run_worker(tmp_path, "travel_app"))

    assert "app module 'travel_app' was found but failed to import" in message
    assert "No module named 'flight_sdk_not_installed'" in message
    assert "not found" not in message


def test_an_app_with_nothing_to_serve_is_refused(tmp_path: Path) -> None:
    (tmp_path / "travel_app.py").write_text("tools = []\n")  # lower case: not the contract

    message = refused(run_worker(tmp_path, "travel_app"))

    assert "has no TOOLS and no WORKFLOWS" in message


def test_a_lifespan_of_another_shape_shows_the_accepted_signatures(tmp_path: Path) -> None:
    (tmp_path / "travel_app.py").write_text(
        TOOL + "\ndef lifespan(database_url, region):\n    pass\n"
    )

    message = refused(run_worker(tmp_path, "travel_app"))

    assert "lifespan(database_url, region)" in message
    assert "lifespan(), lifespan(database_url: str) or lifespan(settings: Settings)" in message


LIFESPANS = """
import contextlib
from sagacity.settings import Settings

SEEN = []

@contextlib.asynccontextmanager
async def {name}({params}):
    SEEN.append(({args}))
    yield
"""


@pytest.mark.parametrize(
    ("params", "args", "expected"),
    [
        ("", "'none'", "none"),
        ("database_url", "database_url", "postgresql://app@db/journal"),
        ("url: str", "url", "postgresql://app@db/journal"),
        ("settings", "settings.task_queue", "travel"),
        ("config: Settings", "config.task_queue", "travel"),
    ],
)
async def test_a_lifespan_gets_what_its_parameter_asks_for(
    params: str,
    args: str,
    expected: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    settings: Settings,
) -> None:
    name = f"travel_{abs(hash(params))}"
    module = TOOL + LIFESPANS.format(name="lifespan", params=params, args=args)
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(module))
    monkeypatch.syspath_prepend(str(tmp_path))

    app = load_apps([name])
    async with AsyncExitStack() as stack:
        await app.enter(
            stack,
            settings.model_copy(update={"task_queue": "travel"}),
            "postgresql://app@db/journal",
        )

    seen = sys.modules[name].SEEN
    assert seen == [expected]


def test_a_lifespan_that_returns_no_context_manager_is_refused_when_entered(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    (tmp_path / "plain_travel.py").write_text(TOOL + "\ndef lifespan():\n    return None\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    ((_, lifespan),) = load_apps(["plain_travel"]).modules

    assert lifespan is not None
    with pytest.raises(SettingsError, match="not an async context manager"):
        lifespan(settings, "postgresql://app@db/journal")


def test_plugins_that_are_not_a_function_of_the_settings_are_refused(tmp_path: Path) -> None:
    (tmp_path / "travel_app.py").write_text(TOOL + "\nplugins = []\n")

    message = refused(run_worker(tmp_path, "travel_app"))

    assert "plugins must be a function plugins(settings)" in message


COMPONENT_APP = """
from contextlib import asynccontextmanager
from sagacity import CompensationContext, compensable, tools_of

class Rooms:
    def __init__(self, pool: dict[str, int]) -> None:
        self.pool = pool

    @compensable(by="release")
    def hold(self, room: str) -> str:
        self.pool[room] = 1
        return room

    def release(self, ctx: CompensationContext) -> None:
        self.pool.pop(ctx.input["room"], None)

OPENED = []

@asynccontextmanager
async def lifespan(database_url: str):
    pool = {"url": 0}
    OPENED.append(pool)
    yield Rooms(pool)
    OPENED.remove(pool)

TOOLS = tools_of
"""


async def test_tools_made_from_what_the_lifespan_opened_are_read_once_it_is_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: Settings
) -> None:
    (tmp_path / "rooms_app.py").write_text(COMPONENT_APP)
    monkeypatch.syspath_prepend(str(tmp_path))

    app = load_apps(["rooms_app"])
    async with AsyncExitStack() as stack:
        await app.enter(stack, settings, "postgresql://app@db/journal")
        (hold,) = app.tools
        # the tool is bound to the instance the lifespan built around what it opened
        assert hold.name == "hold" and hold("r1") == "r1"
        assert sys.modules["rooms_app"].OPENED == [{"url": 0, "r1": 1}]
    assert sys.modules["rooms_app"].OPENED == []
