"""``sagacity anchors baseline``: the cut-over that turns anchors on for a journal kept without."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import psycopg

from sagacity.evidence.keys import generate_key
from sagacity.journal import Draft, Phase
from sagacity.store import JournalStore
from tests.ops.conftest import Cli, pinned_trust


async def _saga(journal: JournalStore, rows: int) -> str:
    saga_id = f"old-{uuid.uuid4().hex[:10]}"
    for n in range(rows):
        await journal.append(Draft(saga_id, "pay", Phase.INTENT, json.dumps({"n": n})))
    return saga_id


async def test_baseline_signs_old_sagas_once_and_verify_then_catches_a_cut_tail(
    sagacity: Cli, journal: JournalStore, owner_database_url: str, tmp_path: Path
) -> None:
    (tmp_path / "keys").mkdir()
    key = tmp_path / "keys" / "signing-key.pem"
    generate_key(key)
    anchors = {
        "SAGACITY_SIGNING_KEY": str(key),
        "SAGACITY_CHECKPOINT_DIR": str(tmp_path / "checkpoints"),
        "SAGACITY_TRUST_FILE": str(pinned_trust(key, tmp_path / "auditor")),
    }
    # written before anchors were on: no checkpoint, so verify calls it unanchored
    old, broken = await _saga(journal, 4), await _saga(journal, 3)
    before = await sagacity("verify", old, extra_env=anchors)
    assert before.code == 1, before.stdout

    async with await psycopg.AsyncConnection.connect(owner_database_url, autocommit=True) as owner:
        await owner.execute(
            "UPDATE side_effect_journal SET payload = 'x' WHERE saga_id = %s AND seq = 2",
            (broken,),
        )
        done = await sagacity("anchors", "baseline", old, broken, "--json", extra_env=anchors)
        assert done.code == 1, done.stderr  # one saga could not be signed
        result = json.loads(done.stdout)
        assert result["signed"] == [{"saga_id": old, "seq": 4}]
        assert "does not verify at seq 2" in result["not_signed"][broken]

        after = await sagacity("verify", old, extra_env=anchors)
        assert after.code == 0, after.stdout

        # a second run leaves an anchored saga alone: it never blesses a later change
        await owner.execute(
            "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq = 4", (old,)
        )
        again = await sagacity("anchors", "baseline", old, "--json", extra_env=anchors)
        assert again.code == 0 and json.loads(again.stdout)["already_anchored"] == [old]
        cut = await sagacity("verify", old, extra_env=anchors)
        assert cut.code == 1 and "has row 4" in cut.stdout and "seq 3" in cut.stdout


async def test_baseline_needs_the_workers_anchor_settings(sagacity: Cli) -> None:
    done = await sagacity("anchors", "baseline")
    assert done.code == 2 and "SAGACITY_SIGNING_KEY" in done.stderr
