"""Proof bundles: one saga's rows, each with its inclusion proof in a signed tree head.

``sagacity prove SAGA --out DIR`` writes one (:func:`write_proof_bundle`, called by
:func:`sagacity.evidence.tlog.prove_saga`); anyone holding the log's public key checks it
offline with :func:`check_proof_bundle`: no database, no Temporal, no network. The bundle holds
the saga's own rows and, of the rest of the log, only hashes.

| file | content |
|---|---|
| ``manifest.json`` | ``format``, ``version``, ``saga_id``, ``rows``, ``tree_size``, ``leaf`` (the leaf encoding), ``published_at``, ``created_at`` |
| ``checkpoint`` | the signed tree head (C2SP checkpoint note) the proofs are against, with its cosignatures |
| ``rows.jsonl`` | the saga's rows in seq order, as export bundles hold them |
| ``proofs.jsonl`` | per row: ``seq``, ``leaf_index``, ``hashes`` (base64, RFC 9162 inclusion path) |

The check also says when the bundle is fresh as of (the newest trusted witness cosignature on its
head) and, given ``not_older_than`` or a newer head, whether it is still current
(:attr:`ProofVerdict.STALE` when not).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.bundle import entry_from_line, entry_line
from sagacity.evidence.heads import (
    Freshness,
    OpenedHead,
    RowProof,
    open_head,
    read_newer,
    weigh,
    witnessed_freshness,
)
from sagacity.evidence.merkle import leaf_data, leaf_hash, verify_inclusion
from sagacity.evidence.note import NoteKey, TreeHead
from sagacity.journal import ChainVerifier, Entry, format_timestamp, parse_json

__all__ = [
    "ProofReport",
    "ProofVerdict",
    "RowProof",
    "check_proof_bundle",
    "write_proof_bundle",
]

FORMAT = "sagacity-saga-proof"
#: ``published_at`` and ``created_at`` were added to version 1 later; bundles without them
#: are still read (dated by their witnesses alone).
VERSION = 1
LEAF_ENCODING = "sagacity-tlog-leaf-v1"
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint"
ROWS = "rows.jsonl"
PROOFS = "proofs.jsonl"
_FILES = {MANIFEST, CHECKPOINT, ROWS, PROOFS}
_TIMESTAMP = "%Y-%m-%dT%H:%M:%S.%fZ"


def write_proof_bundle(
    out: Path,
    saga_id: str,
    note: str,
    rows: Sequence[Entry],
    proofs: Sequence[RowProof],
    *,
    published_at: datetime | None = None,
) -> None:
    """Write the bundle of ``saga_id`` into ``out`` (created; an existing one must be empty);
    ``published_at`` is when the log published ``note``'s head."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvidenceUnavailable(f"{out} exists and is not an empty folder")
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "saga_id": saga_id,
        "rows": len(rows),
        "tree_size": TreeHead.parse(note[: note.rindex("\n\n") + 1]).size,
        "leaf": LEAF_ENCODING,
        "published_at": None if published_at is None else format_timestamp(published_at),
        "created_at": format_timestamp(datetime.now(UTC)),
    }
    try:
        out.mkdir(parents=True, exist_ok=True)
        (out / CHECKPOINT).write_text(note, encoding="utf-8")
        (out / ROWS).write_text("".join(entry_line(r) + "\n" for r in rows), encoding="utf-8")
        (out / PROOFS).write_text("".join(p.line() + "\n" for p in proofs), encoding="utf-8")
        (out / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise EvidenceUnavailable(f"cannot write the proof bundle {out}: {exc}") from None


class ProofVerdict(StrEnum):
    """The outcome of checking a proof bundle, and its exit status."""

    VERIFIED = "VERIFIED"  # every row chains and is in a head the trusted key signed
    FAILED = "FAILED"  # something does not verify (problems say what)
    UNTRUSTED = "UNTRUSTED"  # proofs hold, but no trusted key was given to check the head
    STALE = "STALE"  # verified, but older than the auditor accepts as current (stale says why)

    @property
    def exit_code(self) -> int:
        return {"VERIFIED": 0, "FAILED": 1, "UNTRUSTED": 3, "STALE": 1}[self.value]


@dataclass
class ProofReport:
    """What checking a proof bundle found; ``rows`` counts every row line, faulty or not."""

    saga_id: str | None = None
    head: TreeHead | None = None
    rows: int = 0
    trusted: bool = False
    problems: list[str] = field(default_factory=list)
    #: the time the bundle is fresh as of, and what says so (None: nothing dates it)
    freshness: Freshness | None = None
    #: why the bundle is not current (``not_older_than``, a newer head): empty when it is
    stale: list[str] = field(default_factory=list)
    #: what the freshness checks could not establish, and what they did
    notes: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> ProofVerdict:
        if self.problems:
            return ProofVerdict.FAILED
        if not self.trusted:
            return ProofVerdict.UNTRUSTED
        return ProofVerdict.STALE if self.stale else ProofVerdict.VERIFIED


def check_proof_bundle(
    path: Path,
    public_key: Ed25519PublicKey | None,
    witnesses: Sequence[NoteKey] = (),
    *,
    pool: Sequence[NoteKey] = (),
    quorum: int = 0,
    not_older_than: timedelta | None = None,
    newer: str | None = None,
    now: datetime | None = None,
) -> ProofReport:
    """Check the bundle at ``path`` offline: the head's signature by ``public_key``, each of
    ``witnesses``' cosignatures (all required) and at least ``quorum`` of ``pool``'s (a trust
    file's witnesses), each row's chain,
    and each row's inclusion proof in that head; then its freshness, against ``not_older_than``
    and ``newer`` (a newer signed note, or the log's ``checkpoints.jsonl``) when given."""
    report = ProofReport()
    try:
        names = {p.name for p in path.iterdir()}
        manifest = parse_json((path / MANIFEST).read_text(encoding="utf-8"))
        note = (path / CHECKPOINT).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        report.problems.append(f"not a readable proof bundle: {exc}")
        return report
    if names != _FILES:
        report.problems.append(f"the bundle holds {sorted(names)}, not {sorted(_FILES)}")
    if (
        not isinstance(manifest, dict)
        or manifest.get("format") != FORMAT
        or manifest.get("version") != VERSION
    ):
        report.problems.append(f"{MANIFEST}: not a {FORMAT} version {VERSION} manifest")
        return report
    report.saga_id = str(manifest.get("saga_id"))
    opened = _head(note, public_key, witnesses, pool, quorum, report)
    if opened is None:
        return report
    head = report.head = opened.head
    if manifest.get("tree_size") != head.size:
        report.problems.append(f"{MANIFEST}: tree_size is not the checkpoint's {head.size}")
    _check_rows(path, head, report)
    if manifest.get("rows") != report.rows:
        report.problems.append(
            f"{MANIFEST}: says {manifest.get('rows')} rows, the bundle holds {report.rows}"
        )
    if report.trusted:
        keys = [*witnesses, *pool]
        _freshness(opened, manifest, public_key, keys, not_older_than, newer, now, report)
    elif not_older_than is not None or newer is not None:
        report.notes.append("freshness not checked: no trusted key to check tree heads with")
    return report


def _check_rows(path: Path, head: TreeHead, report: ProofReport) -> None:
    """Every row's chain and inclusion proof; every row is counted, past a fault too."""
    assert report.saga_id is not None
    chain = ChainVerifier(report.saga_id)
    broken = False
    for row, proof in _pairs(path, report):
        report.rows += 1
        if row is None or proof is None:
            continue
        where = f"saga {row.saga_id!r} seq {row.seq}"
        problem = chain.feed(row)
        if problem is not None and not broken:
            # the chain's first fault is named; rows after it are still counted and proved
            broken = True
            report.problems.append(f"{ROWS}: {where}: {problem.fault}: {problem.detail}")
        if proof.seq != row.seq:
            report.problems.append(f"{PROOFS}: {where} has the proof of seq {proof.seq}")
            continue
        leaf = leaf_hash(leaf_data(row.saga_id, row.seq, row.hash))
        if not verify_inclusion(leaf, proof.index, head.size, proof.hashes, head.root):
            report.problems.append(
                f"{where}: its inclusion proof (leaf {proof.index}) does not verify against "
                f"tree head {head.size}"
            )


def _freshness(
    opened: OpenedHead,
    manifest: dict[str, object],
    key: Ed25519PublicKey | None,
    witnesses: Sequence[NoteKey],
    not_older_than: timedelta | None,
    newer: str | None,
    now: datetime | None,
    report: ProofReport,
) -> None:
    assert key is not None
    fresh = witnessed_freshness(opened)
    published = manifest.get("published_at")
    if fresh is None and isinstance(published, str):
        try:
            at = datetime.strptime(published, _TIMESTAMP).replace(tzinfo=UTC)
        except ValueError:
            report.problems.append(f"{MANIFEST}: published_at {published!r} is not a timestamp")
            return
        # the manifest of a proof bundle is not signed: anyone holding it can change this
        source = "the tree head's publication time, as the bundle's unsigned manifest states it"
        fresh = Freshness(at, source, False)
    report.freshness = fresh
    other = None
    if newer is not None:
        try:
            other = read_newer(newer, key, witnesses)
        except EvidenceUnavailable as exc:
            report.problems.append(f"the checkpoint you gave: {exc}")
            return
    found = weigh(
        opened.head,
        fresh,
        not_older_than=not_older_than,
        newer=other,
        now=now or datetime.now(UTC),
    )
    report.freshness = found.fresher or fresh
    report.stale += found.stale
    report.problems += found.problems
    report.notes += found.notes


def _head(
    note: str,
    key: Ed25519PublicKey | None,
    required: Sequence[NoteKey],
    pool: Sequence[NoteKey],
    quorum: int,
    report: ProofReport,
) -> OpenedHead | None:
    """The head, opened with ``key``: each of ``required`` must have cosigned it, and at least
    ``quorum`` of ``pool``."""
    try:
        if key is None:
            return OpenedHead(TreeHead.parse(note[: note.rindex("\n\n") + 1]))
        opened = open_head(note, key, [*required, *pool])
    except ValueError as exc:
        report.problems.append(f"{CHECKPOINT}: {exc}")
        return None
    report.trusted = True
    for name in opened.forged:
        report.problems.append(f"{CHECKPOINT}: the cosignature of witness {name!r} does not verify")
    missing = sorted(w.name for w in required if w.name not in opened.witnessed)
    if missing:
        report.problems.append(f"{CHECKPOINT}: no cosignature of witness {', '.join(missing)}")
    pooled = OpenedHead(
        opened.head,
        {w.name: opened.witnessed[w.name] for w in pool if w.name in opened.witnessed},
        quorum=quorum,
    )
    short = pooled.short_of_quorum
    if short is not None:
        report.problems.append(f"{CHECKPOINT}: {short}")
    return opened


def _pairs(path: Path, report: ProofReport) -> Iterator[tuple[Entry | None, RowProof | None]]:
    """Rows and their proofs, line by line; a damaged line is a problem and comes as None."""
    with (
        (path / ROWS).open(encoding="utf-8", errors="replace") as rows,
        (path / PROOFS).open(encoding="utf-8", errors="replace") as proofs,
    ):
        for number, (row_line, proof_line) in enumerate(zip(rows, proofs, strict=False), start=1):
            row: Entry | None = None
            proof: RowProof | None = None
            try:
                row = entry_from_line(row_line)
            except ValueError as exc:
                report.problems.append(f"{ROWS} line {number}: damaged: {exc}")
            if row is not None and row.saga_id != report.saga_id:
                report.problems.append(
                    f"{ROWS} line {number}: a row of saga {row.saga_id!r}, not of this bundle's"
                )
                row = None
            try:
                proof = RowProof.parse(proof_line)[0]
            except ValueError as exc:
                report.problems.append(f"{PROOFS} line {number}: damaged: {exc}")
            yield row, proof
        if next(rows, None) is not None or next(proofs, None) is not None:
            report.problems.append(f"{ROWS} and {PROOFS} hold different numbers of lines")
