"""The pytest plugin (entry point ``pytest11``): the session's stack, a worker for the user's
app, the rollback prover, and one table of every proof at the end of the run.

Fixtures, all session-scoped and started only when a test asks for one (async, on the session's
event loop: pytest-asyncio with ``asyncio_default_test_loop_scope = "session"``):

* ``sagacity_stack``: a :class:`~sagacity.testing.SagacityStack`: Temporal at
  ``TEMPORAL_ADDRESS`` or an in-memory dev server, and a fresh journal database (dropped at the
  end) on the server of ``SAGACITY_DATABASE_URL`` or the embedded Postgres under ``.sagacity``;
* ``sagacity_app_modules``: the app modules to serve, from the ``sagacity_apps`` ini option
  (override the fixture to choose otherwise);
* ``sagacity_app``: a :class:`~sagacity.testing.RunningApp`: those modules' lifespans entered
  and a worker serving their tools and workflows;
* ``sagacity_prover``: a :class:`~sagacity.testing.RollbackProver` whose reports make the
  table printed after the run.
"""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator, Callable
from typing import TYPE_CHECKING, Any

import pytest

from sagacity.testing.report import ProofReport, proof_table

if TYPE_CHECKING:
    from sagacity.testing.apps import RunningApp
    from sagacity.testing.prover import RollbackProver
    from sagacity.testing.stack import SagacityStack

_REPORTS = pytest.StashKey[list[ProofReport]]()


def _session_fixture(fn: Callable[..., Any]) -> Any:
    """``fn`` as a session-scoped async fixture on the session's loop (pytest-asyncio); without
    pytest-asyncio, a fixture that says what to install."""
    if importlib.util.find_spec("pytest_asyncio") is None:

        def missing() -> None:
            pytest.fail(f"{fn.__name__} is an async fixture: pip install 'sagacity[testing]'")

        missing.__name__ = fn.__name__
        return pytest.fixture(scope="session")(missing)
    import pytest_asyncio

    return pytest_asyncio.fixture(scope="session", loop_scope="session")(fn)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "sagacity_apps",
        "app modules (as for `sagacity worker --app`) the sagacity_app fixture serves",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_REPORTS] = []


@_session_fixture
async def sagacity_stack(pytestconfig: pytest.Config) -> AsyncIterator[SagacityStack]:
    from sagacity.settings import load_settings
    from sagacity.testing.stack import open_stack

    settings = load_settings()
    if not settings.data_dir.is_absolute():
        # the default `.sagacity` is the project's, wherever pytest was started from
        data_dir = pytestconfig.rootpath / settings.data_dir
        settings = settings.model_copy(update={"data_dir": data_dir})
    async with open_stack(settings) as stack:
        yield stack


@pytest.fixture(scope="session")
def sagacity_app_modules(pytestconfig: pytest.Config) -> list[str]:
    modules: list[str] = pytestconfig.getini("sagacity_apps")
    return modules


@_session_fixture
async def sagacity_app(
    sagacity_stack: SagacityStack, sagacity_app_modules: list[str]
) -> AsyncIterator[RunningApp]:
    from sagacity.testing.apps import serve_apps

    if not sagacity_app_modules:
        pytest.fail(
            "sagacity_app serves no app: name your app modules in the pytest ini "
            '(sagacity_apps = ["travel_app"]) or override the sagacity_app_modules fixture'
        )
    async with serve_apps(sagacity_stack, sagacity_app_modules) as app:
        yield app


@pytest.fixture(scope="session")
def sagacity_prover(sagacity_stack: SagacityStack, pytestconfig: pytest.Config) -> RollbackProver:
    from sagacity.testing.prover import RollbackProver

    return RollbackProver(sagacity_stack, on_report=pytestconfig.stash[_REPORTS].append)


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    reports = config.stash.get(_REPORTS, [])
    if reports:
        terminalreporter.write_sep("=", "sagacity rollback proofs")
        terminalreporter.write_line(proof_table(reports))
