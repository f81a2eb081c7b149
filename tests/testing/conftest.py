"""The prover's fixtures on the project's own session stack: one Temporal and one journal
database for the whole run, rather than a second stack of the plugin's own."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from sagacity.devstack import Endpoints
from sagacity.settings import Settings
from sagacity.testing import SagacityStack, attach_stack


@pytest.fixture(scope="session")
async def sagacity_stack(
    settings: Settings, endpoints: Endpoints, database_url: str
) -> AsyncIterator[SagacityStack]:
    """The plugin's ``sagacity_stack``, overridden as a user whose suite already runs a stack
    would: attached to the session's Temporal and journal database."""
    update = {
        "database_url": database_url,
        "temporal_address": endpoints.temporal_address,
        "temporal_namespace": endpoints.temporal_namespace,
    }
    async with attach_stack(settings.model_copy(update=update)) as stack:
        yield stack
