"""Retention: export sagas past the retention period to a bundle, check it, then purge them.

Nothing is deleted unless the bundle verifies. Each saga whose own report in the bundle is
clean gets a signed ``purged`` checkpoint naming the bundle (written before its rows go, so an
interrupted run never looks like an attacker's deletion), and is then deleted by the retention
role, only if no row was appended since the export. A saga whose chain or anchors fail is kept
in the database for investigation, and named in the result.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

from sagacity.errors import RetentionRefused
from sagacity.evidence.bundle import manifest_digest, verify_bundle
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointWriter
from sagacity.evidence.export import export_bundle
from sagacity.evidence.report import Agreement, Source
from sagacity.journal import format_timestamp
from sagacity.store.journal import JournalStore
from sagacity.store.retention import RetentionStore

__all__ = ["MIN_RETENTION", "RetentionRun", "run_retention"]

#: The shortest period accepted: six months, the floor the EU AI Act sets for such logs.
MIN_RETENTION = timedelta(days=183)


@dataclass
class RetentionRun:
    """What a retention run did. ``bundle`` is None when no saga was due."""

    cutoff: datetime
    bundle: Path | None = None
    manifest_sha256: str | None = None
    #: rows deleted per purged saga
    purged: dict[str, int] = field(default_factory=dict)
    #: sagas exported but kept in the database, and why
    kept: dict[str, str] = field(default_factory=dict)


async def run_retention(
    journal: JournalStore,
    retention: RetentionStore,
    out: Path,
    *,
    older_than: timedelta = MIN_RETENTION,
    checkpoints: CheckpointWriter | None = None,
    now: datetime | None = None,
    keyring: Path | None = None,
) -> RetentionRun:
    """Export every saga idle for ``older_than`` into the new bundle ``out`` (with the decision
    ``keyring`` file, when given), then purge them."""
    if older_than < MIN_RETENTION:
        raise RetentionRefused(
            f"a retention period of {older_than} is shorter than the minimum {MIN_RETENTION.days} days"
        )
    cutoff = (now or datetime.now(UTC)) - older_than
    run = RetentionRun(cutoff)
    expired = await retention.expired(cutoff)
    if not expired:
        return run
    reader = (
        None
        if checkpoints is None
        else CheckpointDir(checkpoints.path, checkpoints.key.public_key())
    )
    note = {"retention": {"older_than_days": older_than.days, "cutoff": format_timestamp(cutoff)}}
    manifest = await export_bundle(
        journal,
        out,
        [e.saga_id for e in expired],
        checkpoints=reader,
        signing_key=None if checkpoints is None else checkpoints.key,
        note=note,
        keyring=keyring,
    )
    report = verify_bundle(out, public_key=None if reader is None else reader.key)
    if report.problems:
        raise RetentionRefused(
            f"the export in {out} does not verify, nothing was purged: "
            + "; ".join(report.problems)
        )
    run.bundle, run.manifest_sha256 = out, manifest_digest(out)
    failed = {s.saga_id: s for s in report.sagas if not s.ok}
    for saga_id, saga in failed.items():
        run.kept[saga_id] = "; ".join(
            f"{c.source} {c.agreement}: {c.detail}" for c in saga.faults()
        )
    if reader is not None:
        # with checkpoints on, a saga without any was not written by a checkpointing worker
        for saga in report.sagas:
            missing = (Source.CHECKPOINT, Agreement.MISSING)
            if saga.ok and any((c.source, c.agreement) == missing for c in saga.checks):
                failed[saga.saga_id] = saga
                run.kept[saga.saga_id] = (
                    "no signed checkpoint of this saga: forged, or older than checkpointing"
                )
    due = [
        (s["saga_id"], s["head_seq"], s["head_hash"])
        for s in manifest["sagas"]
        if s["saga_id"] not in failed and s["rows"]
    ]
    if checkpoints is not None:
        for saga_id, seq, hash_ in due:
            checkpoints.purged(saga_id, seq, hash_, run.manifest_sha256)
    run.purged = await retention.purge(due)
    for saga_id, _, _ in due:
        if saga_id not in run.purged:
            run.kept[saga_id] = "rows were appended after the export"
    return run
