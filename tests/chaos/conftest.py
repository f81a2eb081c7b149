"""Chaos fixtures: a private embedded stack (restartable), a fresh database per test, the profiles.

``SAGACITY_CHAOS`` picks how hard the chaos tests push:

* ``short`` (the default, run with the rest of the suite): the kill and restart tests run 12
  sagas each; the operations test 44, through 3 worker kills and 3 Postgres outages.
* ``long``: the kill and restart tests run 50 sagas each; the operations test as by default.
* ``operations-long``: the operations test runs 520 sagas through 24 kills and 10 outages; the
  others as by default.

``SAGACITY_CHAOS_SEED`` replays a run's random choices (each test prints the seed it used).
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from temporalio.client import Client

from sagacity.devstack import DevStack
from sagacity.settings import Settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.migrate import migrate
from sagacity.temporal.plugin import SagacityPlugin
from tests.chaos.operations_run import OPS_PROFILES, OpsProfile
from tests.chaos.scenario import PROFILES, Profile

#: SAGACITY_CHAOS -> (the kill and restart tests' profile, the operations test's profile)
LEVELS = {
    "short": ("short", "operations"),
    "long": ("long", "operations"),
    "operations-long": ("short", "operations-long"),
}


def _level() -> tuple[str, str]:
    name = os.environ.get("SAGACITY_CHAOS", "short")
    if name not in LEVELS:
        raise pytest.UsageError(f"SAGACITY_CHAOS={name!r}: expected one of {sorted(LEVELS)}")
    return LEVELS[name]


@pytest.fixture(scope="session")
def profile() -> Profile:
    return PROFILES[_level()[0]]


@pytest.fixture(scope="session")
def ops_profile() -> OpsProfile:
    return OPS_PROFILES[_level()[1]]


@pytest.fixture
def rng() -> random.Random:
    seed = int(os.environ.get("SAGACITY_CHAOS_SEED") or random.randrange(2**32))
    print(f"chaos seed: SAGACITY_CHAOS_SEED={seed}")
    return random.Random(seed)


@pytest.fixture(scope="package")
def chaos_dir(settings: Settings) -> Iterator[Path]:
    # under the repository's data folder, not pytest's temp root: the Postgres wheel opens every
    # parent of its cluster folder to its system user
    path = settings.data_dir.expanduser().resolve() / "scratch" / f"chaos-{uuid4().hex[:8]}"
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="package")
async def chaos_stack(settings: Settings, chaos_dir: Path) -> AsyncIterator[DevStack]:
    """An embedded Postgres and a file-backed Temporal server of these tests' own, whatever the
    session uses: restarting them must not disturb other tests, and a restarted Temporal must
    remember its workflows."""
    own = Settings(
        database_url=None,
        temporal_address=None,
        data_dir=chaos_dir,
        temporal_namespace=settings.temporal_namespace,
    )
    stack = DevStack(own, temporal_db=chaos_dir / "temporal.db")
    await stack.start()
    try:
        yield stack
    finally:
        await stack.stop()


@pytest.fixture
async def chaos_database(chaos_stack: DevStack) -> AsyncIterator[str]:
    """A fresh, migrated database on the private Postgres."""
    server = chaos_stack.endpoints.database_url
    name = f"chaos_{uuid4().hex[:12]}"
    url = await ensure_database(server, name)
    await migrate(url)
    yield url
    await drop_database(server, name)


@pytest.fixture
async def chaos_client(chaos_stack: DevStack) -> Client:
    endpoints = chaos_stack.endpoints
    return await Client.connect(
        endpoints.temporal_address,
        namespace=endpoints.temporal_namespace,
        plugins=[SagacityPlugin()],
    )
