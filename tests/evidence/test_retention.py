"""Retention: idle sagas are exported, the bundle verified, then purged by the retention role."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg
import pytest

from sagacity.devstack import Endpoints
from sagacity.errors import RetentionRefused, StoreUnavailable
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.bundle import manifest_digest, verify_bundle
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.retention import run_retention
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, seal
from sagacity.store import JournalStore, Pool, open_pool
from sagacity.store.retention import RetentionStore
from tests.conftest import scratch_database
from tests.evidence.conftest import anchored_saga, retention_login
from tests.evidence.test_tamper_suite import insert

LONG_AGO = datetime.now(UTC) - timedelta(days=200)


# Retention purges every idle saga of a database: these tests get one of their own, so that old
# rows other tests write (without this module's checkpoints) are not theirs to purge.
@pytest.fixture(scope="module")
async def _retention_database(endpoints: Endpoints) -> AsyncIterator[tuple[str, str]]:
    async with scratch_database(endpoints, "sagacity_retention") as urls:
        yield urls


@pytest.fixture(scope="module")
def owner_database_url(_retention_database: tuple[str, str]) -> str:
    return _retention_database[0]


@pytest.fixture(scope="module")
async def pool(_retention_database: tuple[str, str]) -> AsyncIterator[Pool]:
    pool = await open_pool(_retention_database[1], max_size=6)
    yield pool
    await pool.close()


@pytest.fixture(scope="module")
def journal(pool: Pool) -> JournalStore:
    return JournalStore(pool)


@pytest.fixture(scope="module")
async def retention_url(owner_database_url: str) -> str:
    return await retention_login(owner_database_url)


@pytest.fixture(scope="module")
async def retention_pool(retention_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(retention_url, max_size=3)
    yield pool
    await pool.close()


async def idle_saga(
    owner: psycopg.AsyncConnection, writer: CheckpointWriter, saga_id: str
) -> list[Entry]:
    """Four rows journaled 200 days ago, checkpointed as they were written."""
    rows: list[Entry] = []
    prev = GENESIS_HASH
    for seq, phase in enumerate((Phase.INTENT, Phase.EXECUTED) * 2, start=1):
        draft = Draft(saga_id, "ship", phase, f'{{"parcel": {seq}}}')
        rows.append(seal(draft, seq=seq, prev_hash=prev, timestamp=LONG_AGO))
        prev = rows[-1].hash
        writer.record(saga_id, seq, prev)
    await insert(owner, rows)
    return rows


async def stored_rows(owner: psycopg.AsyncConnection, saga_id: str) -> int:
    cur = await owner.execute(
        "SELECT count(*) FROM side_effect_journal WHERE saga_id = %s", (saga_id,)
    )
    row = await cur.fetchone()
    assert row is not None
    return int(row[0])


async def test_idle_sagas_are_exported_verified_and_purged_and_stay_accounted_for(
    retention_pool: Pool,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    tmp_path: Path,
) -> None:
    old = [f"ev-old-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    recent = f"ev-new-{uuid.uuid4().hex[:8]}"
    for saga_id in old:
        await idle_saga(owner, writer, saga_id)
    await anchored_saga(journal, writer, recent)

    run = await run_retention(
        JournalStore(retention_pool),
        RetentionStore(retention_pool),
        tmp_path / "retained",
        checkpoints=writer,
    )

    assert {run.purged[s] for s in old} == {4} and recent not in run.purged
    assert [await stored_rows(owner, s) for s in [*old, recent]] == [0, 0, 6]
    assert run.bundle is not None and run.manifest_sha256 == manifest_digest(run.bundle)
    bundle = verify_bundle(run.bundle, public_key=checkpoints.key)
    assert bundle.ok and {s.saga_id for s in bundle.sagas} >= set(old)
    # a purged saga is not a deleted saga: its signed tombstone names the bundle
    async with aclosing(verify_journal(journal, checkpoints=checkpoints)) as everything:
        found = {r.saga_id: r async for r in everything}
    for saga_id in old:
        assert found[saga_id].ok
        (tombstone,) = found[saga_id].checks
        assert run.manifest_sha256 in tombstone.detail and "purged by retention" in tombstone.detail
    assert found[recent].ok


async def test_a_saga_that_fails_verification_is_exported_but_kept(
    retention_pool: Pool,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    tmp_path: Path,
) -> None:
    saga_id = f"ev-old-bad-{uuid.uuid4().hex[:8]}"
    await idle_saga(owner, writer, saga_id)
    await owner.execute(
        "UPDATE side_effect_journal SET input = '{}' WHERE saga_id = %s AND seq = 3", (saga_id,)
    )

    run = await run_retention(
        JournalStore(retention_pool),
        RetentionStore(retention_pool),
        tmp_path / "r",
        checkpoints=writer,
    )

    assert saga_id not in run.purged and "hash_mismatch" in run.kept[saga_id]
    assert await stored_rows(owner, saga_id) == 4
    assert run.bundle is not None
    assert saga_id in {s.saga_id for s in verify_bundle(run.bundle).sagas}


async def test_a_saga_whose_head_moved_since_the_export_is_not_purged(
    retention_pool: Pool, owner: psycopg.AsyncConnection, writer: CheckpointWriter, saga_id: str
) -> None:
    rows = await idle_saga(owner, writer, saga_id)

    purged = await RetentionStore(retention_pool).purge([(saga_id, 2, rows[1].hash)])

    assert purged == {} and await stored_rows(owner, saga_id) == 4


async def test_the_application_role_cannot_purge(
    database_url: str, owner: psycopg.AsyncConnection, writer: CheckpointWriter, saga_id: str
) -> None:
    rows = await idle_saga(owner, writer, saga_id)
    pool = await open_pool(database_url)  # the session's sagacity_app login
    try:
        with pytest.raises(StoreUnavailable, match="sagacity_retention"):
            await RetentionStore(pool).purge([(saga_id, 4, rows[-1].hash)])
    finally:
        await pool.close()
    assert await stored_rows(owner, saga_id) == 4


async def test_a_period_shorter_than_six_months_is_refused(
    retention_pool: Pool, tmp_path: Path
) -> None:
    with pytest.raises(RetentionRefused, match="shorter than the minimum 183 days"):
        await run_retention(
            JournalStore(retention_pool),
            RetentionStore(retention_pool),
            tmp_path / "r",
            older_than=timedelta(days=30),
        )
    assert not (tmp_path / "r").exists()
