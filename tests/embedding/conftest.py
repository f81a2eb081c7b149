"""Fixtures of the embedding tests: the settings of a user's own worker process."""

from __future__ import annotations

import pytest

from sagacity.devstack import Endpoints
from sagacity.settings import Settings


@pytest.fixture
def app_settings(settings: Settings, endpoints: Endpoints, database_url: str) -> Settings:
    """The settings a user's worker process has: the journal as sagacity_app, their Temporal."""
    return settings.model_copy(
        update={
            "database_url": database_url,
            "temporal_address": endpoints.temporal_address,
            "temporal_namespace": endpoints.temporal_namespace,
        }
    )
