"""A rolled-back checkpoint store is named by the default `sagacity verify --all`.

The insider can write every folder the workers write: after more rows were logged (and the dev
stack's witness cosigned the new tree head), they restore ``tlog/`` from an earlier copy, so the
published heads no longer show those rows. The witness holds its own state: `verify --all`, with
no flag, asks it for the latest head it cosigned and names the rollback and the rows it hides.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.keys import load_private_key
from sagacity.journal import Draft, Phase
from sagacity.store import JournalStore, open_pool
from tests.evidence.test_default_config_tamper import NewUser, new_user  # noqa: F401


async def more_logged_rows(user: NewUser, saga_id: str) -> None:
    """A saga of two rows journaled and checkpointed as a worker does, then logged."""
    signer = CheckpointWriter(
        user.checkpoint_dir, load_private_key(Path(user.shell.exports["SAGACITY_SIGNING_KEY"]))
    )
    pool = await open_pool(user.shell.exports["SAGACITY_DATABASE_URL"], max_size=2)
    try:
        journal = JournalStore(pool)
        for phase, payload in ((Phase.INTENT, "{}"), (Phase.EXECUTED, '{"id": "r-1"}')):
            row = await journal.append(Draft(saga_id, "reserve", phase, '{"n": 1}', payload))
            signer.record(saga_id, row.seq, row.hash)
    finally:
        await pool.close()
    integrated = await user.shell("log", "integrate")
    assert integrated.code == 0 and "published tree head" in integrated.stdout, integrated


async def test_a_rolled_back_tlog_folder_is_named_by_verify_all_from_the_witness(
    new_user: NewUser,  # noqa: F811
    tmp_path: Path,
) -> None:
    tlog = new_user.checkpoint_dir / "tlog"
    earlier = tmp_path / "tlog-earlier"
    shutil.copytree(tlog, earlier)
    before = int((tlog / "checkpoint").read_text().split("\n")[1])
    hidden = "later-saga-rolled-back"
    await more_logged_rows(new_user, hidden)
    clean = await new_user.shell("verify", "--all")
    assert clean.code == 0, clean

    shutil.rmtree(tlog)
    shutil.copytree(earlier, tlog)  # the insider's rollback: two heads' worth of rows unseen
    run = await new_user.shell("verify", "--all")
    assert run.code == 1, run
    assert "transparency log:" in run.stdout, run
    assert f"tree head {before}" in run.stdout or f"size {before}" in run.stdout, run
    assert f"saga '{hidden}' seq 1" in run.stdout and f"saga '{hidden}' seq 2" in run.stdout, run
