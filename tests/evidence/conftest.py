"""Evidence fixtures: the journal, an attacker's raw connection, a signing key and a checkpoint folder.

``anchored_saga`` writes a saga the way a checkpointing worker does: each append is followed by
a signed checkpoint of the new head.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import psycopg
import pytest
from psycopg.conninfo import make_conninfo

from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.keys import generate_key, load_private_key
from sagacity.journal import Draft, Entry, Phase
from sagacity.store import JournalStore, Pool, open_pool

# the `sagacity` command run in child processes (tests/approvals) and in-process (tests/ops);
# a database of its own for the transparency log's tests (test_tlog, test_witness); the saga
# fixtures (an in-process worker with the Order tools) for the Temporal anchor tests
from tests.approvals.conftest import cli  # noqa: F401
from tests.evidence.test_tlog import log_db  # noqa: F401
from tests.ops.conftest import sagacity  # noqa: F401
from tests.temporal.conftest import approvals, shop, shop_session, worker  # noqa: F401


@pytest.fixture(scope="session")
async def pool(database_url: str) -> AsyncIterator[Pool]:
    pool = await open_pool(database_url, max_size=6)
    yield pool
    await pool.close()


@pytest.fixture(scope="session")
def journal(pool: Pool) -> JournalStore:
    return JournalStore(pool)


@pytest.fixture
async def owner(owner_database_url: str) -> AsyncIterator[psycopg.AsyncConnection]:
    """A raw connection as the tables' owner: what an attacker with database access holds."""
    async with await psycopg.AsyncConnection.connect(owner_database_url, autocommit=True) as conn:
        yield conn


@pytest.fixture(scope="session")
async def retention_url(owner_database_url: str) -> str:
    return await retention_login(owner_database_url)


async def retention_login(owner_database_url: str) -> str:
    """A login that is a member of sagacity_retention, as an operator's retention job is."""
    async with await psycopg.AsyncConnection.connect(owner_database_url, autocommit=True) as conn:
        await conn.execute(
            "DO $$ BEGIN CREATE ROLE sagacity_retention_job LOGIN;"
            " EXCEPTION WHEN duplicate_object THEN NULL; END $$"
        )
        await conn.execute("GRANT sagacity_retention TO sagacity_retention_job")
    return make_conninfo(owner_database_url, user="sagacity_retention_job")


@pytest.fixture(scope="session")
def signing_key(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keys") / "signing.pem"
    generate_key(path)
    return path


@pytest.fixture
def writer(tmp_path: Path, signing_key: Path) -> CheckpointWriter:
    return CheckpointWriter(tmp_path / "checkpoints", load_private_key(signing_key))


@pytest.fixture
def checkpoints(writer: CheckpointWriter) -> CheckpointDir:
    return CheckpointDir(writer.path, writer.key.public_key())


@pytest.fixture
def saga_id() -> str:
    return f"ev-{uuid.uuid4().hex[:12]}"


async def anchored_saga(
    journal: JournalStore, writer: CheckpointWriter | None, saga_id: str, calls: int = 3
) -> list[Entry]:
    """``calls`` tool calls (INTENT + EXECUTED each), checkpointed after every append."""
    rows = []
    for n in range(calls):
        args = f'{{"amount": {n + 1}, "to": "Zoë"}}'
        for draft in (
            Draft(saga_id, "pay", Phase.INTENT, args),
            Draft(saga_id, "pay", Phase.EXECUTED, args, f'{{"id": "tx{n}"}}'),
        ):
            row = await journal.append(draft)
            if writer is not None:
                writer.record(saga_id, row.seq, row.hash)
            rows.append(row)
    return rows
