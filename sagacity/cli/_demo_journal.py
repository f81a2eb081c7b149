"""What the demo shows of a saga's journal: its rows, and their verification against the anchors."""

from __future__ import annotations

from contextlib import aclosing

from pydantic import BaseModel

from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.store import JournalStore

__all__ = ["JournalRow", "Verification", "read_verified"]


class JournalRow(BaseModel):
    seq: int
    tool: str
    phase: str
    input: str
    payload: str
    timestamp: str
    hash: str


class Verification(BaseModel):
    ok: bool
    rows: int
    head_seq: int
    head_hash: str
    problem: str | None = None
    #: what the signed checkpoints said of the journal ("checkpoint agrees at seq 10 …")
    anchors: list[str] = []
    #: fingerprint of the key that signed them, and where they are
    key_id: str | None = None
    checkpoint_dir: str | None = None


async def read_verified(
    journal: JournalStore, signer: CheckpointWriter, saga_id: str
) -> tuple[list[JournalRow], Verification]:
    """The saga's rows, and its chain verified against the checkpoints ``signer`` wrote."""
    rows = await journal.read(saga_id)
    anchored = CheckpointDir(signer.path, signer.key.public_key())
    async with aclosing(verify_journal(journal, saga_ids=[saga_id], checkpoints=anchored)) as found:
        (checked,) = [r async for r in found]
    verdict = checked.verdict
    return [
        JournalRow(
            seq=e.seq,
            tool=e.tool_name,
            phase=e.phase.value,
            input=e.input,
            payload=e.payload,
            timestamp=e.timestamp.isoformat(),
            hash=e.hash,
        )
        for e in rows
    ], Verification(
        ok=checked.ok,
        rows=verdict.rows,
        head_seq=verdict.head_seq,
        head_hash=verdict.head_hash,
        problem="; ".join(f.detail for f in checked.faults()) or None,
        anchors=[f"{c.source.value} {c.agreement.value}: {c.detail}" for c in checked.checks],
        key_id=signer.key_id,
        checkpoint_dir=str(signer.path),
    )
