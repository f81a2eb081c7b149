"""``sagacity saga journal`` says what it checked: the chain only, or the chain and its anchors."""

from __future__ import annotations

from pathlib import Path

import psycopg

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.keys import public_pem
from sagacity.store import JournalStore
from tests.evidence.conftest import anchored_saga
from tests.ops.conftest import Cli

HASHED_TIMESTAMP = 'to_char(timestamp, \'YYYY-MM-DD"T"HH24:MI:SS.US"Z"\')'


def anchors_env(writer: CheckpointWriter, tmp_path: Path) -> dict[str, str]:
    public = tmp_path / "checkpoint-key.pub"
    public.write_bytes(public_pem(writer.key.public_key()))
    return {
        "SAGACITY_CHECKPOINT_DIR": str(writer.path),
        "SAGACITY_CHECKPOINT_PUBLIC_KEY": str(public),
    }


async def test_without_anchors_a_truncated_saga_is_said_to_be_checked_by_its_chain_only(
    sagacity: Cli, journal: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    await anchored_saga(journal, None, saga_id)
    await owner.execute(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 4", (saga_id,)
    )

    shown = await sagacity("saga", "journal", saga_id)

    assert shown.code == 0, shown.stderr
    assert (
        "chain verified (hash chain only: a cut tail or a recomputed chain is not detectable "
        "without anchors): 4 rows, head seq 4"
    ) in shown.stdout
    verdict = (await sagacity("saga", "journal", saga_id, "--json")).json()["verdict"]
    assert (verdict["ok"], verdict["anchored"], verdict["anchors"]) == (True, False, [])


async def test_json_rows_carry_the_saga_and_the_hashed_timestamp(
    sagacity: Cli, journal: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    await anchored_saga(journal, None, saga_id, calls=1)
    cur = await owner.execute(
        f"SELECT saga_id, seq, {HASHED_TIMESTAMP}, hash FROM side_effect_journal "
        "WHERE saga_id = %s ORDER BY seq",
        (saga_id,),
    )
    stored = await cur.fetchall()

    rows = (await sagacity("saga", "journal", saga_id, "--json")).json()["rows"]

    assert [(r["saga_id"], r["seq"], r["timestamp"], r["hash"]) for r in rows] == stored
    assert rows[0]["input"] == '{"amount": 1, "to": "Zoë"}'  # as stored, not re-encoded


async def test_with_checkpoints_configured_the_anchors_are_checked(
    sagacity: Cli,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    saga_id: str,
    tmp_path: Path,
) -> None:
    env = anchors_env(writer, tmp_path)
    rows = await anchored_saga(journal, writer, saga_id)

    intact = await sagacity("saga", "journal", saga_id, extra_env=env)
    assert intact.code == 0, intact.stdout + intact.stderr
    assert f"chain and anchors verified: 6 rows, head seq 6 hash {rows[-1].hash}" in intact.stdout
    assert "checkpoint agrees at seq 6" in intact.stdout

    await owner.execute(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 4", (saga_id,)
    )
    cut = await sagacity("saga", "journal", saga_id, extra_env=env)
    assert cut.code == 1, cut.stdout + cut.stderr
    assert "chain verified but an anchor disagrees: 4 rows, head seq 4" in cut.stdout
    assert "ANCHOR checkpoint seq 5 disagrees:" in cut.stdout and "rows were removed" in cut.stdout
    verdict = (await sagacity("saga", "journal", saga_id, "--json", extra_env=env)).json()[
        "verdict"
    ]
    assert (verdict["ok"], verdict["anchored"]) == (False, True)
    (anchor,) = verdict["anchors"]
    assert (anchor["source"], anchor["agreement"], anchor["seq"]) == ("checkpoint", "disagrees", 5)

    await owner.execute("DELETE FROM side_effect_journal WHERE saga_id = %s", (saga_id,))
    gone = await sagacity("saga", "journal", saga_id, extra_env=env)
    assert gone.code == 1, gone.stdout + gone.stderr
    assert f"saga {saga_id} has no journal rows" in gone.stdout
    assert "the saga was deleted" in gone.stdout


async def test_a_row_with_a_phase_sagacity_never_writes_is_shown_not_a_traceback(
    sagacity: Cli, journal: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    await anchored_saga(journal, None, saga_id, calls=1)
    await owner.execute(
        "UPDATE side_effect_journal SET phase = 'BOGUS' WHERE saga_id = %s AND seq = 2",
        (saga_id,),
    )

    shown = await sagacity("saga", "journal", saga_id)
    as_json = await sagacity("saga", "journal", saga_id, "--json")

    assert shown.code == 1 and "Traceback" not in shown.stderr, shown.stderr
    assert "BOGUS" in shown.stdout and "chain BROKEN at seq 2: hash_mismatch" in shown.stdout
    assert as_json.code == 1 and as_json.json()["rows"][1]["phase"] == "BOGUS"
