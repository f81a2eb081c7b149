"""Proof bundles: one saga's rows, each with its inclusion proof in a signed tree head.

``sagacity prove SAGA --out DIR`` writes one (:func:`write_proof_bundle`, called by
:func:`sagacity.evidence.tlog.prove_saga`); anyone holding the log's public key checks it
offline with :func:`check_proof_bundle`: no database, no Temporal, no network. The bundle holds
the saga's own rows and, of the rest of the log, only hashes.

| file | content |
|---|---|
| ``manifest.json`` | ``format``, ``version``, ``saga_id``, ``rows``, ``tree_size``, ``leaf`` (the leaf encoding) |
| ``checkpoint`` | the signed tree head (C2SP checkpoint note) the proofs are against |
| ``rows.jsonl`` | the saga's rows in seq order, as export bundles hold them |
| ``proofs.jsonl`` | per row: ``seq``, ``leaf_index``, ``hashes`` (base64, RFC 9162 inclusion path) |
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.bundle import entry_from_line, entry_line
from sagacity.evidence.merkle import leaf_data, leaf_hash, verify_inclusion
from sagacity.evidence.note import NoteKey, TreeHead, open_note
from sagacity.journal import ChainVerifier, Entry, to_json

__all__ = [
    "ProofReport",
    "ProofVerdict",
    "RowProof",
    "check_proof_bundle",
    "write_proof_bundle",
]

FORMAT = "sagacity-saga-proof"
VERSION = 1
LEAF_ENCODING = "sagacity-tlog-leaf-v1"
MANIFEST = "manifest.json"
CHECKPOINT = "checkpoint"
ROWS = "rows.jsonl"
PROOFS = "proofs.jsonl"
_FILES = {MANIFEST, CHECKPOINT, ROWS, PROOFS}


@dataclass(frozen=True, slots=True)
class RowProof:
    """Row ``seq`` is leaf ``index`` of the tree; ``hashes`` is its inclusion path."""

    seq: int
    index: int
    hashes: list[bytes]

    def line(self) -> str:
        encoded = [base64.b64encode(h).decode("ascii") for h in self.hashes]
        return to_json({"seq": self.seq, "leaf_index": self.index, "hashes": encoded})

    @classmethod
    def parse(cls, line: str) -> RowProof:
        raw = json.loads(line)
        if not isinstance(raw, dict) or set(raw) != {"seq", "leaf_index", "hashes"}:
            raise ValueError("a proof needs exactly seq, leaf_index and hashes")
        seq, index, hashes = raw["seq"], raw["leaf_index"], raw["hashes"]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (seq, index)):
            raise ValueError("seq and leaf_index must be integers")
        if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
            raise ValueError("hashes must be a list of base64 strings")
        try:
            return cls(seq, index, [base64.b64decode(h, validate=True) for h in hashes])
        except (binascii.Error, ValueError):
            raise ValueError("a hash is not base64") from None


def write_proof_bundle(
    out: Path, saga_id: str, note: str, rows: Sequence[Entry], proofs: Sequence[RowProof]
) -> None:
    """Write the bundle of ``saga_id`` into ``out`` (created; an existing one must be empty)."""
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvidenceUnavailable(f"{out} exists and is not an empty folder")
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "saga_id": saga_id,
        "rows": len(rows),
        "tree_size": TreeHead.parse(note[: note.rindex("\n\n") + 1]).size,
        "leaf": LEAF_ENCODING,
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

    @property
    def exit_code(self) -> int:
        return {"VERIFIED": 0, "FAILED": 1, "UNTRUSTED": 3}[self.value]


@dataclass
class ProofReport:
    """What checking a proof bundle found."""

    saga_id: str | None = None
    head: TreeHead | None = None
    rows: int = 0
    trusted: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> ProofVerdict:
        if self.problems:
            return ProofVerdict.FAILED
        return ProofVerdict.VERIFIED if self.trusted else ProofVerdict.UNTRUSTED


def check_proof_bundle(
    path: Path,
    public_key: Ed25519PublicKey | None,
    witnesses: Sequence[NoteKey] = (),
    *,
    pool: Sequence[NoteKey] = (),
    quorum: int = 0,
) -> ProofReport:
    """Check the bundle at ``path`` offline: the head's signature by ``public_key``, the
    cosignature of each of ``witnesses`` and of at least ``quorum`` of ``pool`` (a trust
    file's witnesses), each row's chain, and each row's inclusion proof in that head."""
    report = ProofReport()
    try:
        names = {p.name for p in path.iterdir()}
        manifest = json.loads((path / MANIFEST).read_text(encoding="utf-8"))
        note = (path / CHECKPOINT).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        report.problems.append(f"not a readable proof bundle: {exc}")
        return report
    if names != _FILES:
        report.problems.append(f"the bundle holds {sorted(names)}, not {sorted(_FILES)}")
    if not isinstance(manifest, dict) or (manifest.get("format"), manifest.get("version")) != (
        FORMAT,
        VERSION,
    ):
        report.problems.append(f"{MANIFEST}: not a {FORMAT} version {VERSION} manifest")
        return report
    report.saga_id = str(manifest.get("saga_id"))
    head = _head(note, public_key, witnesses, pool, quorum, report)
    if head is None:
        return report
    report.head = head
    if manifest.get("tree_size") != head.size:
        report.problems.append(f"{MANIFEST}: tree_size is not the checkpoint's {head.size}")
    chain = ChainVerifier(report.saga_id)
    for row, proof in _pairs(path, report):
        report.rows += 1
        where = f"saga {row.saga_id!r} seq {row.seq}"
        problem = chain.feed(row)
        if problem is not None:
            report.problems.append(f"{ROWS}: {where}: {problem.fault}: {problem.detail}")
            break
        if proof.seq != row.seq:
            report.problems.append(f"{PROOFS}: {where} has the proof of seq {proof.seq}")
            break
        leaf = leaf_hash(leaf_data(row.saga_id, row.seq, row.hash))
        if not verify_inclusion(leaf, proof.index, head.size, proof.hashes, head.root):
            report.problems.append(
                f"{where}: its inclusion proof (leaf {proof.index}) does not verify against "
                f"tree head {head.size}"
            )
    if manifest.get("rows") != report.rows and not report.problems:
        report.problems.append(
            f"{MANIFEST}: says {manifest.get('rows')} rows, the bundle holds {report.rows}"
        )
    return report


def _head(
    note: str,
    key: Ed25519PublicKey | None,
    witnesses: Sequence[NoteKey],
    pool: Sequence[NoteKey],
    quorum: int,
    report: ProofReport,
) -> TreeHead | None:
    origin = note.split("\n", 1)[0]
    try:
        if key is None:
            return TreeHead.parse(note[: note.rindex("\n\n") + 1])
        head = open_note(note, NoteKey(origin, key), witnesses).head
        if quorum:
            open_note(note, NoteKey(origin, key), pool, quorum=quorum)
    except ValueError as exc:
        report.problems.append(f"{CHECKPOINT}: {exc}")
        return None
    report.trusted = True
    return head


def _pairs(path: Path, report: ProofReport) -> Iterator[tuple[Entry, RowProof]]:
    """Rows and their proofs, line by line; a damaged or missing line ends it as a problem."""
    with (
        (path / ROWS).open(encoding="utf-8") as rows,
        (path / PROOFS).open(encoding="utf-8") as proofs,
    ):
        for number, (row_line, proof_line) in enumerate(zip(rows, proofs, strict=False), start=1):
            try:
                row = entry_from_line(row_line)
            except ValueError as exc:
                report.problems.append(f"{ROWS} line {number}: damaged: {exc}")
                return
            if row.saga_id != report.saga_id:
                report.problems.append(
                    f"{ROWS} line {number}: a row of saga {row.saga_id!r}, not of this bundle's"
                )
                return
            try:
                proof = RowProof.parse(proof_line)
            except ValueError as exc:
                report.problems.append(f"{PROOFS} line {number}: damaged: {exc}")
                return
            yield row, proof
        if next(rows, None) is not None or next(proofs, None) is not None:
            report.problems.append(f"{ROWS} and {PROOFS} hold different numbers of lines")
