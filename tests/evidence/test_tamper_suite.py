"""The tamper suite: an attacker with SQL access to the journal, and what verification reports.

Each case writes a checkpointed saga of six rows, attacks it through a raw owner connection, and
checks that the report names the saga, the seq and the source that disagrees. The table in
docs/evidence.md lists these cases; keep the two in step.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from contextlib import aclosing
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter, log_name, sign
from sagacity.evidence.report import Agreement, SagaReport, Source
from sagacity.journal import GENESIS_HASH, Draft, Entry, Phase, entry_hash, seal
from sagacity.store import JournalStore
from tests.evidence.conftest import anchored_saga

Attack = Callable[["Scene"], Awaitable[None]]

_UPDATE_ROW = (
    "UPDATE side_effect_journal SET input = %s, payload = %s, hash = %s"
    " WHERE saga_id = %s AND seq = %s"
)


async def rewrite(
    owner: psycopg.AsyncConnection, journal: JournalStore, saga_id: str, seq: int, input: str
) -> None:
    """Change row ``seq``'s input and recompute every hash from there on, as the hash rules say."""
    rows = await journal.read(saga_id)
    prev = GENESIS_HASH
    for row in rows:
        changed = replace(row, input=input) if row.seq == seq else row
        fresh = replace(changed, hash=entry_hash(prev, changed))
        if fresh != row:
            await owner.execute(
                _UPDATE_ROW, (fresh.input, fresh.payload, fresh.hash, saga_id, fresh.seq)
            )
        prev = fresh.hash


async def insert(owner: psycopg.AsyncConnection, rows: list[Entry]) -> None:
    for e in rows:
        await owner.execute(
            "INSERT INTO side_effect_journal VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            (e.saga_id, e.seq, e.tool_name, e.phase.value, e.input, e.payload,
             e.timestamp.replace(tzinfo=None), e.hash),
        )  # fmt: skip


def forged_rows(saga_id: str) -> list[Entry]:
    """A well-formed chain the attacker computes from the public hash rules."""
    rows: list[Entry] = []
    prev = GENESIS_HASH
    for seq, phase in enumerate((Phase.INTENT, Phase.EXECUTED), start=1):
        draft = Draft(saga_id, "refund", phase, '{"amount": 5000}')
        rows.append(seal(draft, seq=seq, prev_hash=prev, timestamp=datetime.now(UTC)))
        prev = rows[-1].hash
    return rows


@dataclass(frozen=True)
class Scene:
    """What an attack works on: the owner's connection, and the saga's checkpoint log."""

    owner: psycopg.AsyncConnection
    journal: JournalStore
    writer: CheckpointWriter
    saga_id: str

    async def sql(self, statement: str, *params: object) -> None:
        await self.owner.execute(statement, (*params, self.saga_id))

    @property
    def log(self) -> Path:
        return self.writer.path / log_name(self.saga_id)


async def stale_edit(scene: Scene) -> None:
    await scene.sql(
        'UPDATE side_effect_journal SET payload = \'{"id": "tx-evil"}\''
        " WHERE seq = 4 AND saga_id = %s"
    )


async def recomputed_edit(scene: Scene) -> None:
    await rewrite(scene.owner, scene.journal, scene.saga_id, 3, '{"amount": 9999, "to": "Mallory"}')


async def truncated_tail(scene: Scene) -> None:
    await scene.sql("DELETE FROM side_effect_journal WHERE seq > 4 AND saga_id = %s")


async def deleted_saga(scene: Scene) -> None:
    await scene.sql("DELETE FROM side_effect_journal WHERE saga_id = %s")


async def deleted_middle_row(scene: Scene) -> None:
    await scene.sql("DELETE FROM side_effect_journal WHERE seq = 3 AND saga_id = %s")


async def reordered_rows(scene: Scene) -> None:
    # rows 2 and 4 trade places: each keeps its content and hash, only the order changes
    for old, new in ((2, -4), (4, 2), (-4, 4)):
        await scene.sql(
            "UPDATE side_effect_journal SET seq = %s WHERE seq = %s AND saga_id = %s", new, old
        )


async def appended_after_end(scene: Scene) -> None:
    # the saga ends and its worker seals its head; then the owner appends a row chained to it
    head = (await scene.journal.read(scene.saga_id))[-1]
    scene.writer.seal(scene.saga_id, head.seq, head.hash, "completed")
    draft = Draft(scene.saga_id, "refund", Phase.EXECUTED, '{"amount": 5000}', '{"id": "re-1"}')
    await insert(
        scene.owner,
        [seal(draft, seq=head.seq + 1, prev_hash=head.hash, timestamp=datetime.now(UTC))],
    )


async def forged_saga(scene: Scene) -> None:
    # an invented saga: no worker ever wrote it, so no checkpoint exists for it
    await deleted_saga(scene)
    scene.log.unlink()
    await insert(scene.owner, forged_rows(scene.saga_id))


async def forged_checkpoint(scene: Scene) -> None:
    # the attacker also writes the checkpoint folder, but can only sign with a key of their own
    await forged_saga(scene)
    theirs = CheckpointWriter(scene.writer.path, Ed25519PrivateKey.generate())
    theirs.record(scene.saga_id, 2, forged_rows(scene.saga_id)[-1].hash)


async def copied_checkpoint(scene: Scene) -> None:
    # a genuine checkpoint of another saga, copied under this saga's name
    await forged_saga(scene)
    scene.log.write_text(sign(scene.writer.key, "another-saga", 2, "a" * 64).line() + "\n")


# case -> attack, (source, agreement, seq) of the first fault the report names
CASES: dict[str, tuple[Attack, tuple[Source, Agreement, int]]] = {
    "edit a row, hashes left stale": (stale_edit, (Source.CHAIN, Agreement.DISAGREES, 4)),
    "edit a row, recompute the chain": (
        recomputed_edit,
        (Source.CHECKPOINT, Agreement.DISAGREES, 3),
    ),
    "delete the last rows": (truncated_tail, (Source.CHECKPOINT, Agreement.DISAGREES, 5)),
    "delete a middle row": (deleted_middle_row, (Source.CHAIN, Agreement.DISAGREES, 4)),
    "delete the whole saga": (deleted_saga, (Source.CHECKPOINT, Agreement.DISAGREES, 1)),
    "reorder rows": (reordered_rows, (Source.CHAIN, Agreement.DISAGREES, 2)),
    "append after the saga ended": (
        appended_after_end,
        (Source.CHECKPOINT, Agreement.DISAGREES, 7),
    ),
    "insert a forged saga": (forged_saga, (Source.CHECKPOINT, Agreement.MISSING, 0)),
    "forge its checkpoint too": (forged_checkpoint, (Source.CHECKPOINT, Agreement.INVALID, 0)),
    "copy another saga's checkpoint": (
        copied_checkpoint,
        (Source.CHECKPOINT, Agreement.INVALID, 0),
    ),
}


async def reports(
    journal: JournalStore, checkpoints: CheckpointDir, saga_ids: list[str] | None
) -> dict[str, SagaReport]:
    async with aclosing(
        verify_journal(journal, saga_ids=saga_ids, checkpoints=checkpoints)
    ) as found:
        return {r.saga_id: r async for r in found}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("scope", ["named", "all"])
async def test_tampering_is_reported_with_saga_seq_and_source(
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    saga_id: str,
    case: str,
    scope: str,
) -> None:
    control = f"ev-control-{uuid.uuid4().hex[:8]}"
    await anchored_saga(journal, writer, saga_id)
    await anchored_saga(journal, writer, control)
    attack, (source, agreement, seq) = CASES[case]

    before = await reports(journal, checkpoints, [saga_id])
    await attack(Scene(owner, journal, writer, saga_id))
    after = await reports(journal, checkpoints, [saga_id, control] if scope == "named" else None)

    assert before[saga_id].ok
    assert after[control].ok
    report = after[saga_id]
    assert not report.ok
    first = report.faults()[0]
    assert (first.source, first.agreement) == (source, agreement)
    if seq:
        assert first.seq == seq
    assert first.detail
    if scope == "all":
        # the other sagas in the database (written by other tests) have no checkpoints here
        assert {r.saga_id for r in after.values() if r.ok} >= {control}


async def test_recomputed_chain_is_located_between_checkpoints(
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    saga_id: str,
) -> None:
    await anchored_saga(journal, writer, saga_id)
    await rewrite(owner, journal, saga_id, 5, '{"amount": 1, "to": "Mallory"}')

    (report,) = (await reports(journal, checkpoints, [saga_id])).values()

    assert report.verdict.ok  # the chain itself holds: only the anchor can tell
    (fault,) = report.faults()
    assert fault.seq == 5
    assert "rewritten" in fault.detail and "still agrees at seq 4" in fault.detail


async def test_forged_checkpoint_names_the_key(
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    checkpoints: CheckpointDir,
    saga_id: str,
) -> None:
    await anchored_saga(journal, writer, saga_id, calls=1)
    await forged_checkpoint(Scene(owner, journal, writer, saga_id))

    (report,) = (await reports(journal, checkpoints, [saga_id])).values()

    detail = report.faults()[0].detail
    assert log_name(saga_id) in detail and "line" in detail
    assert "not by the trusted key" in detail
