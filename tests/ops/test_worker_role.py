"""A worker says at start whether its login can rewrite the journal, and production refuses one that can."""

from __future__ import annotations

import pytest

from tests.ops.conftest import StartWorker


async def test_a_worker_of_the_app_role_starts_quietly(start_worker: StartWorker) -> None:
    worker = await start_worker()
    log = worker.text()
    assert "journal append-only for role sagacity_app" in log
    assert "WRITABLE JOURNAL" not in log


async def test_a_worker_with_owner_credentials_warns(
    start_worker: StartWorker, owner_database_url: str
) -> None:
    worker = await start_worker(SAGACITY_DATABASE_URL=owner_database_url)
    log = worker.text()
    assert "WARNING" in log and "WRITABLE JOURNAL (dev mode)" in log
    assert "UPDATE" in log and "connect as sagacity_app" in log


async def test_production_refuses_a_worker_with_owner_credentials(
    start_worker: StartWorker, owner_database_url: str
) -> None:
    with pytest.raises(RuntimeError, match="worker exited early") as refused:
        await start_worker(SAGACITY_DATABASE_URL=owner_database_url, SAGACITY_PRODUCTION="true")
    message = str(refused.value)
    assert "refusing to start" in message and "SAGACITY_ALLOW_WRITABLE_JOURNAL=true" in message
    assert "worker ready" not in message


async def test_production_starts_one_when_explicitly_allowed(
    start_worker: StartWorker, owner_database_url: str
) -> None:
    worker = await start_worker(
        SAGACITY_DATABASE_URL=owner_database_url,
        SAGACITY_PRODUCTION="true",
        SAGACITY_ALLOW_WRITABLE_JOURNAL="true",
    )
    assert "WRITABLE JOURNAL (allowed by SAGACITY_ALLOW_WRITABLE_JOURNAL)" in worker.text()


async def test_production_refuses_a_worker_without_a_decision_keyring(
    start_worker: StartWorker,
) -> None:
    with pytest.raises(RuntimeError, match="worker exited early") as refused:
        await start_worker(SAGACITY_PRODUCTION="true", SAGACITY_KEYRING="")
    assert "a production worker needs SAGACITY_KEYRING" in str(refused.value)
