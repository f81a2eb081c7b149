"""Evidence bundles: a folder an auditor can verify with no database, Temporal or network.

Layout (``docs/evidence.md`` gives every field)::

    manifest.json       format, creation time, key fingerprint, each saga's head, each file's SHA-256
    journal.jsonl       every exported row, one JSON object a line, by saga then seq
    checkpoints/*.jsonl the exported sagas' signed checkpoint logs, as written
    public_key.pem      the key those checkpoints are checked with

Verification reads nothing but the folder and uses only the journal core, the standard library
and ``cryptography``; the database store is imported for type checking only.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Iterable, Iterator
from contextlib import aclosing
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointLog, log_name
from sagacity.evidence.keys import key_id, load_public_key, public_pem
from sagacity.evidence.report import (
    Agreement,
    AnchorCheck,
    SagaReport,
    Source,
    checkpoint_probe,
    saga_report,
    settle,
)
from sagacity.journal import ChainVerifier, Entry, format_timestamp, to_json

if TYPE_CHECKING:
    from sagacity.store.journal import JournalStore

__all__ = [
    "FORMAT",
    "BundleReport",
    "BundleVerifier",
    "entry_from_line",
    "entry_line",
    "export_bundle",
    "manifest_digest",
    "verify_bundle",
]

FORMAT = "sagacity-evidence-bundle"
VERSION = 1
MANIFEST = "manifest.json"
JOURNAL = "journal.jsonl"
PUBLIC_KEY = "public_key.pem"
CHECKPOINTS = "checkpoints"
_TIMESTAMP = "%Y-%m-%dT%H:%M:%S.%fZ"
_ROW_FIELDS = ("saga_id", "seq", "tool_name", "phase", "input", "payload", "timestamp", "hash")


def entry_line(entry: Entry) -> str:
    """A row as one JSON line; ``timestamp`` is the exact text the hash covers."""
    return to_json(
        {
            "saga_id": entry.saga_id,
            "seq": entry.seq,
            "tool_name": entry.tool_name,
            "phase": str(entry.phase),
            "input": entry.input,
            "payload": entry.payload,
            "timestamp": format_timestamp(entry.timestamp),
            "hash": entry.hash,
        }
    )


def entry_from_line(line: str) -> Entry:
    """The row a bundle line holds; ``ValueError`` saying why when it holds none."""
    raw = json.loads(line)
    if not isinstance(raw, dict) or set(raw) != set(_ROW_FIELDS):
        raise ValueError(f"a row needs exactly the fields {', '.join(_ROW_FIELDS)}")
    seq = raw["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError(f"seq {seq!r} is not an integer")
    texts = [raw[name] for name in _ROW_FIELDS if name != "seq"]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("every field but seq must be a string")
    stamp = datetime.strptime(raw["timestamp"], _TIMESTAMP).replace(tzinfo=UTC)
    # the phase is kept as stored text: a tampered phase must reach the hash check, not fail here
    phase: Any = raw["phase"]
    return Entry(
        raw["saga_id"],
        seq,
        raw["tool_name"],
        phase,
        raw["input"],
        raw["payload"],
        stamp,
        raw["hash"],
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_digest(bundle: Path) -> str:
    """SHA-256 of the bundle's manifest: the one value that names the whole bundle."""
    return _sha256(bundle / MANIFEST)


async def export_bundle(
    journal: JournalStore,
    out: Path,
    saga_ids: Iterable[str],
    *,
    checkpoints: CheckpointDir | None = None,
    note: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Write the rows of ``saga_ids`` (and their checkpoints) as a bundle in ``out``; return the manifest.

    Rows are exported as stored, broken chains included: evidence of tampering is evidence too.
    ``out`` must not exist yet, or be an empty directory.
    """
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise EvidenceUnavailable(f"{out} exists and is not an empty directory")
    out.mkdir(parents=True, exist_ok=True)
    sagas = []
    with (out / JOURNAL).open("w", encoding="utf-8", newline="\n") as lines:
        for saga_id in sorted(set(saga_ids)):
            rows, last = 0, None
            async with aclosing(journal.stream(saga_id)) as entries:
                async for entry in entries:
                    lines.write(entry_line(entry) + "\n")
                    rows, last = rows + 1, entry
            sagas.append(
                {
                    "saga_id": saga_id,
                    "rows": rows,
                    "head_seq": 0 if last is None else last.seq,
                    "head_hash": None if last is None else last.hash,
                }
            )
    signed_by = None
    if checkpoints is not None:
        (out / CHECKPOINTS).mkdir()
        for saga in sagas:
            source = checkpoints.log_path(str(saga["saga_id"]))
            if source.is_file():
                shutil.copyfile(source, out / CHECKPOINTS / source.name)
        (out / PUBLIC_KEY).write_bytes(public_pem(checkpoints.key))
        signed_by = key_id(checkpoints.key)
    files = {
        path.relative_to(out).as_posix(): {"sha256": _sha256(path), "bytes": path.stat().st_size}
        for path in sorted(out.rglob("*"))
        if path.is_file()
    }
    manifest = {
        "format": FORMAT,
        "version": VERSION,
        "created_at": format_timestamp(datetime.now(UTC)),
        "hash_rules": "sagacity-journal-v1",
        "key_id": signed_by,
        "note": note or {},
        "sagas": sagas,
        "files": files,
    }
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (out / MANIFEST).write_text(text, encoding="utf-8")
    return manifest


@dataclass
class BundleReport:
    """Everything verifying a bundle found."""

    path: Path
    key_id: str | None
    problems: list[str] = field(default_factory=list)
    sagas: list[SagaReport] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems and all(s.ok for s in self.sagas)


class BundleVerifier:
    """Checks a bundle in two passes: :meth:`files` (manifest and digests), then :meth:`sagas`.

    ``public_key`` pins the key checkpoints must be signed with; without it the bundle's own
    ``public_key.pem`` is used, and its fingerprint is reported for comparing out of band.
    """

    def __init__(self, path: Path, *, public_key: Ed25519PublicKey | None = None) -> None:
        self.path = path
        self.problems: list[str] = []
        self.manifest: dict[str, Any] = {}
        self.key: Ed25519PublicKey | None = public_key
        self.key_id: str | None = None
        self._pinned = public_key

    def files(self) -> list[str]:
        """Problems with the manifest, the files it lists, and the key; empty when none."""
        self.problems = []
        try:
            manifest = json.loads((self.path / MANIFEST).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            self.problems.append(f"{MANIFEST}: unreadable: {exc}")
            return self.problems
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            self.problems.append(f"{MANIFEST}: not a {FORMAT} manifest")
            return self.problems
        if manifest.get("version") != VERSION:
            self.problems.append(
                f"{MANIFEST}: version {manifest.get('version')!r} is not {VERSION}"
            )
            return self.problems
        self.manifest = manifest
        self._check_digests(manifest.get("files") or {})
        self._check_key(manifest.get("key_id"))
        return self.problems

    def _check_digests(self, listed: dict[str, Any]) -> None:
        present = {
            p.relative_to(self.path).as_posix()
            for p in self.path.rglob("*")
            if p.is_file() and p.name != MANIFEST
        }
        for name in sorted(present - set(listed)):
            self.problems.append(f"{name}: not listed in the manifest (added after export)")
        for name, expected in sorted(listed.items()):
            if name not in present:
                self.problems.append(f"{name}: listed in the manifest but missing")
                continue
            actual = _sha256(self.path / name)
            want = expected.get("sha256") if isinstance(expected, dict) else None
            if actual != want:
                self.problems.append(
                    f"{name}: SHA-256 is {actual[:16]}… but the manifest says {str(want)[:16]}…: "
                    "the file or the manifest was changed after export"
                )

    def _check_key(self, listed_id: object) -> None:
        key_file = self.path / PUBLIC_KEY
        if key_file.is_file():
            try:
                bundled = load_public_key(key_file)
            except EvidenceUnavailable as exc:
                self.problems.append(f"{PUBLIC_KEY}: {exc}")
                return
            if listed_id != key_id(bundled):
                self.problems.append(
                    f"{PUBLIC_KEY}: fingerprint {key_id(bundled)} is not the manifest's {listed_id}"
                )
            if self._pinned is not None and key_id(self._pinned) != key_id(bundled):
                self.problems.append(
                    f"{PUBLIC_KEY}: the bundle's key {key_id(bundled)} is not the key you "
                    f"trust ({key_id(self._pinned)})"
                )
            self.key = self._pinned or bundled
        elif (self.path / CHECKPOINTS).is_dir() and self._pinned is None:
            self.problems.append(f"{PUBLIC_KEY}: missing, so checkpoints cannot be checked")
        self.key_id = None if self.key is None else key_id(self.key)

    def sagas(self) -> Iterator[SagaReport]:
        """One report per saga, streaming ``journal.jsonl``; file-level finds go to ``problems``."""
        listed = {str(s.get("saga_id")): s for s in self.manifest.get("sagas") or []}
        checkpoints = None
        if self.key is not None and (self.path / CHECKPOINTS).is_dir():
            checkpoints = CheckpointDir(self.path / CHECKPOINTS, self.key)
        done: set[str] = set()
        for saga_id, rows in groupby(self._entries(), key=attrgetter("saga_id")):
            if saga_id in done:
                self.problems.append(f"{JOURNAL}: rows of saga {saga_id!r} are not contiguous")
                continue
            done.add(saga_id)
            yield self._saga(saga_id, rows, listed.get(saga_id), checkpoints)
        for saga_id in sorted(set(listed) - done):
            yield self._saga(saga_id, iter(()), listed[saga_id], checkpoints)
        if checkpoints is not None:
            for saga_id in checkpoints.saga_ids():
                if saga_id not in listed:
                    self.problems.append(
                        f"{CHECKPOINTS}/{log_name(saga_id)}: saga {saga_id!r} is not in the manifest"
                    )

    def _entries(self) -> Iterator[Entry]:
        """The rows in file order; undecodable lines become problems and are skipped."""
        try:
            lines = (self.path / JOURNAL).open("rb")
        except OSError as exc:
            if self.manifest.get("sagas"):
                self.problems.append(f"{JOURNAL}: unreadable: {exc}")
            return
        with lines:
            for number, raw in enumerate(lines, start=1):
                try:
                    yield entry_from_line(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as exc:
                    self.problems.append(f"{JOURNAL} line {number}: not a journal row: {exc}")

    def _saga(
        self,
        saga_id: str,
        rows: Iterator[Entry],
        listed: dict[str, Any] | None,
        checkpoints: CheckpointDir | None,
    ) -> SagaReport:
        log = checkpoints.load(saga_id) if checkpoints is not None else CheckpointLog(saga_id)
        wanted = log.seqs
        stored: dict[int, str] = {}
        verifier = ChainVerifier(saga_id)
        count, last = 0, None
        for entry in rows:
            # every row is read, past a chain fault too: anchors and the manifest need the tail
            verifier.feed(entry)
            count, last = count + 1, entry
            if entry.seq in wanted:
                stored.setdefault(entry.seq, entry.hash)
        verdict = verifier.verdict()
        checks = [_manifest_check(listed, count, last)]
        if checkpoints is not None:
            checks += settle(checkpoint_probe(log, verdict), stored.get)
        return saga_report(verdict, checks)


def _manifest_check(listed: dict[str, Any] | None, rows: int, last: Entry | None) -> AnchorCheck:
    if listed is None:
        return AnchorCheck(
            Source.MANIFEST, Agreement.MISSING, "saga not listed in the manifest", fatal=True
        )
    head_seq = 0 if last is None else last.seq
    head_hash = None if last is None else last.hash
    want = (listed.get("rows"), listed.get("head_seq"), listed.get("head_hash"))
    if want == (rows, head_seq, head_hash):
        return AnchorCheck(Source.MANIFEST, Agreement.AGREES, f"at seq {head_seq}", head_seq)
    detail = (
        f"the manifest lists {want[0]} rows ending at seq {want[1]} hashed {str(want[2])[:12]}…, "
        f"the bundle holds {rows} ending at seq {head_seq} hashed {str(head_hash)[:12]}…"
    )
    return AnchorCheck(Source.MANIFEST, Agreement.DISAGREES, detail, head_seq, fatal=True)


def verify_bundle(path: Path, *, public_key: Ed25519PublicKey | None = None) -> BundleReport:
    """Verify a whole bundle and collect the findings (the CLI streams instead)."""
    verifier = BundleVerifier(path, public_key=public_key)
    verifier.files()
    sagas = list(verifier.sagas()) if verifier.manifest else []
    return BundleReport(path, verifier.key_id, verifier.problems, sagas)
