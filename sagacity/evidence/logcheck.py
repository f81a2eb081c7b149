"""The transparency log as an anchor of ``sagacity verify``: what it holds of each saga.

A saga's logged rows were fixed when the sequencer logged them, under signed tree heads: a row
the journal now hashes otherwise was rewritten after it was logged, one it no longer has was
deleted. That holds even when the saga's checkpoint file was rolled back with the rewrite. The
leaves themselves are trusted through the latest published head: for every saga at once, one
pass recomputes the whole tree from the leaf table (:class:`~sagacity.evidence.logverify.LogVerifier`);
for named sagas, each of their leaves is proved included in it (O(log n) stored hashes a leaf).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from sagacity.errors import LogInconsistent
from sagacity.evidence.attest import Attestor, unlogged
from sagacity.evidence.heads import inclusion_paths
from sagacity.evidence.logverify import LogFinding, LogVerifier, deleted, in_leaf, rewritten
from sagacity.evidence.merkle import leaf_data, leaf_hash, verify_inclusion
from sagacity.evidence.report import Agreement, AnchorCheck, Source
from sagacity.evidence.tlog import GRACE, HeadLog, Published
from sagacity.journal import format_timestamp
from sagacity.store.tlog import SagaLogRow, TlogStore

__all__ = ["LogAnchor"]

# a saga's findings listed one by one before the rest are counted
_LISTED = 5
# leaves proved together (one read of the stored subtree hashes)
_PROOF_BATCH = 1000


@dataclass
class _Found:
    """A saga's fatal log findings: the first ``_LISTED`` kept, the rest counted."""

    listed: list[LogFinding] = field(default_factory=list)
    more: int = 0

    def add(self, finding: LogFinding) -> None:
        if len(self.listed) < _LISTED:
            self.listed.append(finding)
        else:
            self.more += 1


class LogAnchor:
    """Compares sagas' journal rows with their leaves under the latest published tree head.

    Without a published head there is nothing to compare (``latest`` is None). Findings about
    the log itself, not one saga (a head that disagrees with the leaf table), go to
    ``problems``.
    """

    def __init__(
        self, store: TlogStore, heads: HeadLog, attestor: Attestor, *, grace: timedelta = GRACE
    ) -> None:
        self.store = store
        self.heads = heads
        self.attestor = attestor
        self.grace = grace
        self.latest: Published | None = heads.latest()
        self.problems: list[str] = []
        self._found: dict[str, _Found] | None = None

    async def scan(self) -> None:
        """Check the whole log once (as ``sagacity log verify``), keeping each saga's findings
        for :meth:`check`; a pass over the leaf table and the rows it lacks."""
        found: dict[str, _Found] = {}
        verifier = LogVerifier(self.store, self.heads, self.attestor, self.grace)
        async with aclosing(verifier.run()) as findings:
            async for finding in findings:
                if not finding.fatal:
                    continue
                if finding.saga_id is None:
                    self.problems.append(f"transparency log: {finding.detail}")
                else:
                    found.setdefault(finding.saga_id, _Found()).add(finding)
        self.latest = verifier.latest
        self._found = found

    def unreported(self) -> Iterator[str]:
        """After :meth:`scan`: the sagas with findings :meth:`check` was not asked about (gone
        from the journal, and from the checkpoint folder)."""
        yield from list(self._found or ())

    async def check(self, saga_id: str) -> list[AnchorCheck]:
        """What the log says of ``saga_id``: each fault, or one line that it agrees."""
        if self.latest is None:
            return []
        if self._found is not None:
            found = self._found.pop(saga_id, _Found())
            proved = None
        else:
            found, proved = await self._saga(saga_id)
        checks = [
            AnchorCheck(
                Source.LOG,
                Agreement.INVALID if f.kind == "leaf_edited" else Agreement.DISAGREES,
                f.detail,
                f.seq,
                fatal=True,
            )
            for f in sorted(found.listed, key=lambda f: f.seq or 0)
        ]
        if found.more:
            more = (
                f"{found.more} more rows disagree with the log (`sagacity log verify` lists them)"
            )
            checks.append(AnchorCheck(Source.LOG, Agreement.DISAGREES, more, fatal=True))
        if checks:
            return checks
        head = f"tree head {self.latest.head.size}, published {format_timestamp(self.latest.at)}"
        if proved is None:
            detail = f"every row it holds of this saga is as the journal holds it ({head})"
        elif proved:
            detail = f"{proved} rows proved included in {head}, each as the journal holds it"
        else:
            detail = f"no row of this saga is in {head} yet"
        return [AnchorCheck(Source.LOG, Agreement.AGREES, detail)]

    async def _saga(self, saga_id: str) -> tuple[_Found, int]:
        """One saga's rows beside its leaves; its leaves proved in the latest head."""
        assert self.latest is not None
        head = self.latest.head
        found = _Found()
        batch: list[SagaLogRow] = []
        proved = 0
        now = datetime.now(UTC)
        self.attestor.begin()
        async with aclosing(self.store.saga_log(saga_id)) as rows:
            async for row in rows:
                if row.index is None:
                    if row.hash is None or row.timestamp is None:
                        continue  # a NULL in a NOT NULL column: the chain check names the row
                    attested = await self.attestor.covers(saga_id, row.seq, row.hash)
                    latest = (head.size, self.latest.at)
                    verdict = unlogged(row.timestamp, attested, latest, now, self.grace)
                    if verdict is not None:
                        kind, detail = verdict
                        found.add(LogFinding(True, detail, saga_id, row.seq, kind))
                    continue
                assert row.row_hash is not None
                where = in_leaf(row.index, head.size if row.index < head.size else None)
                if row.hash is None:
                    if row.seq > self.attestor.purged(saga_id):
                        found.add(LogFinding(True, deleted(where), saga_id, row.seq, "deleted"))
                elif row.hash != row.row_hash:
                    detail = rewritten(row.seq, row.hash, row.row_hash, where)
                    found.add(LogFinding(True, detail, saga_id, row.seq, "rewritten"))
                if row.index < head.size:
                    batch.append(row)
                    if len(batch) == _PROOF_BATCH:
                        proved += await self._prove(saga_id, batch, found)
                        batch = []
        proved += await self._prove(saga_id, batch, found)
        return found, proved

    async def _prove(self, saga_id: str, rows: list[SagaLogRow], found: _Found) -> int:
        """Prove each leaf of ``rows`` in the latest head; a leaf that is not there is a fault."""
        assert self.latest is not None
        head = self.latest.head
        try:
            paths = await inclusion_paths(self.store, head.size, [r.index or 0 for r in rows])
        except LogInconsistent as exc:
            found.add(LogFinding(True, str(exc), saga_id, rows[0].seq, "leaf_edited"))
            return 0
        proved = 0
        for row, path in zip(rows, paths, strict=True):
            assert row.index is not None and row.row_hash is not None
            leaf = leaf_hash(leaf_data(saga_id, row.seq, row.row_hash))
            if verify_inclusion(leaf, row.index, head.size, path, head.root):
                proved += 1
            else:
                detail = (
                    f"leaf {row.index} is not the one tree head {head.size} holds: the leaf "
                    "table or the stored tree was edited"
                )
                found.add(LogFinding(True, detail, saga_id, row.seq, "leaf_edited"))
        return proved
