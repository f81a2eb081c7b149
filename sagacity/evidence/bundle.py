"""Evidence bundles: a folder an auditor can verify with no database, Temporal or network.

Layout (``docs/evidence.md`` gives every field)::

    manifest.json       format, version, creation time, anchors, each saga's head, each file's SHA-256
    manifest.sig        the manifest's Ed25519 signature, when the exporter held the signing key
    journal.jsonl       every exported row, one JSON object a line, by saga then seq
    checkpoints/*.jsonl the exported sagas' signed checkpoint logs, as written
    tlog/checkpoint     the transparency log's newest tree head, with its witnesses' cosignatures
    tlog/proofs.jsonl   per saga, the inclusion proof of its last exported row in that head
    public_key.pem      the key the signatures were made with
    keyring.json        the keys decisions are signed with, when the exporter had a keyring

A bundle proves something only against a key the auditor trusts, only as far as its anchors
reach, and only as of the time its tree head is fresh as of: the verdict (:class:`BundleVerdict`)
says which. Verification reads nothing but the folder and uses only the journal core, the
standard library and ``cryptography``; the database stores are imported for type checking only.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from itertools import groupby
from operator import attrgetter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.bundle_head import HEAD, LOG_PROOFS, CarriedHead
from sagacity.evidence.checkpoints import CheckpointDir, CheckpointLog, log_name
from sagacity.evidence.decisions import DecisionCheck, Keyring, load_keyring
from sagacity.evidence.heads import Freshness
from sagacity.evidence.keys import key_id, load_public_key
from sagacity.evidence.report import (
    Agreement,
    AnchorCheck,
    SagaReport,
    Source,
    checkpoint_probe,
    decision_checks,
    decision_notes,
    saga_report,
    settle,
)
from sagacity.journal import ChainVerifier, Entry, format_timestamp, parse_json, to_json

if TYPE_CHECKING:
    from sagacity.evidence.trust import TrustRoots

__all__ = [
    "FORMAT",
    "NO_CHECKPOINTS",
    "NO_SIGNATURE",
    "VERSION",
    "BundleReport",
    "BundleVerdict",
    "BundleVerifier",
    "entry_from_line",
    "entry_line",
    "file_sha256",
    "judge",
    "manifest_digest",
    "verify_bundle",
]

FORMAT = "sagacity-evidence-bundle"
#: Written by :func:`sagacity.evidence.export.export_bundle`. Version 2 added ``anchors``, each saga's ``checkpointed``
#: and ``manifest.sig``; version 3 the ``tlog`` anchor (the log's tree head and inclusion
#: proofs). Versions 1 (read as unsigned) and 2 are still read.
VERSION = 3
_READABLE = (1, 2, 3)
MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"
JOURNAL = "journal.jsonl"
PUBLIC_KEY = "public_key.pem"
KEYRING = "keyring.json"
CHECKPOINTS = "checkpoints"
#: Prefix of the bytes a manifest signature covers; a checkpoint's prefix differs, so neither
#: signature can pass for the other.
SIGNATURE_DOMAIN = b"sagacity-bundle-v2\n"
_TIMESTAMP = "%Y-%m-%dT%H:%M:%S.%fZ"
_ROW_FIELDS = ("saga_id", "seq", "tool_name", "phase", "input", "payload", "timestamp", "hash")

#: What cannot be detected in a saga that has no signed checkpoint.
NO_CHECKPOINTS = (
    "rows cut from the end of the saga, or its whole chain recomputed with fresh hashes, "
    "cannot be detected"
)
#: What cannot be detected in a bundle whose manifest is not signed.
NO_SIGNATURE = (
    "the manifest is not signed: a saga removed whole from the bundle (rows, checkpoints and "
    "manifest entry), and edits to the manifest's own fields (created_at, note), cannot be detected"
)


class BundleVerdict(StrEnum):
    """The one-word outcome of verifying a bundle; :attr:`exit_code` is the CLI's status."""

    VERIFIED = "VERIFIED"  # trusted key, every anchor present and agreeing
    VERIFIED_UNANCHORED = "VERIFIED, UNANCHORED"  # as far as it goes, with --allow-unanchored
    UNANCHORED = "UNANCHORED"  # anchors missing and not allowed: refused
    UNTRUSTED = "UNTRUSTED"  # consistent with its own key, but no trusted key was given
    STALE = "STALE"  # verified, but older than the auditor accepts as current: refused
    FAILED = "FAILED"  # something was changed, or cannot be read

    @property
    def exit_code(self) -> int:
        return _EXIT[self]


_EXIT = {
    BundleVerdict.VERIFIED: 0,
    BundleVerdict.VERIFIED_UNANCHORED: 0,
    BundleVerdict.UNANCHORED: 1,
    BundleVerdict.FAILED: 1,
    BundleVerdict.UNTRUSTED: 3,
    BundleVerdict.STALE: 1,
}


def judge(
    *,
    failed: bool,
    unanchored: list[str],
    trusted: bool,
    allow_unanchored: bool,
    stale: bool = False,
) -> BundleVerdict:
    """FAILED, then UNANCHORED (unless allowed), then UNTRUSTED, then STALE, then VERIFIED
    (maybe unanchored)."""
    if failed:
        return BundleVerdict.FAILED
    if unanchored and not allow_unanchored:
        return BundleVerdict.UNANCHORED
    if not trusted:
        return BundleVerdict.UNTRUSTED
    if stale:
        return BundleVerdict.STALE
    return BundleVerdict.VERIFIED_UNANCHORED if unanchored else BundleVerdict.VERIFIED


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
    raw = parse_json(line)
    if not isinstance(raw, dict) or set(raw) != set(_ROW_FIELDS):
        raise ValueError(f"a row needs exactly the fields {', '.join(_ROW_FIELDS)}")
    seq = raw["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool):
        raise ValueError(f"seq {seq!r} is not an integer")
    texts = [raw[name] for name in _ROW_FIELDS if name != "seq"]
    if not all(isinstance(t, str) for t in texts):
        raise ValueError("every field but seq must be a string")
    stamp = datetime.strptime(raw["timestamp"], _TIMESTAMP).replace(tzinfo=UTC)
    if format_timestamp(stamp) != raw["timestamp"]:
        # strptime accepts "5" for "05": only the one hashed form is a timestamp here
        raise ValueError(f"timestamp {raw['timestamp']!r} is not in the hashed form")
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


def file_sha256(path: Path) -> str:
    """The SHA-256 (hex) of the file at ``path``, read a MiB at a time."""
    digest = hashlib.sha256()
    with path.open("rb") as data:
        for chunk in iter(lambda: data.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def manifest_digest(bundle: Path) -> str:
    """SHA-256 of the bundle's manifest: the one value that names the whole bundle."""
    return file_sha256(bundle / MANIFEST)


@dataclass
class BundleReport:
    """Everything verifying a bundle found; :meth:`verdict` sums it up."""

    path: Path
    #: fingerprint of the key signatures were checked with (the trusted one, if given)
    key_id: str | None
    #: whether that key was given by the verifier rather than taken from the bundle
    trusted: bool
    problems: list[str] = field(default_factory=list)
    sagas: list[SagaReport] = field(default_factory=list)
    #: what the bundle's anchors leave undetectable, one sentence each; empty when anchored
    unanchored: list[str] = field(default_factory=list)
    #: every line of ``journal.jsonl`` read, faulty or not
    rows: int = 0
    #: the time the bundle is fresh as of, and what says so
    freshness: Freshness | None = None
    #: why the bundle is not current (``not_older_than``, a newer head): empty when it is
    stale: list[str] = field(default_factory=list)
    #: what the freshness checks established, or could not
    notes: list[str] = field(default_factory=list)

    def verdict(self, *, allow_unanchored: bool = False) -> BundleVerdict:
        """The bundle's verdict; see :func:`judge`."""
        failed = bool(self.problems) or not all(s.ok for s in self.sagas)
        return judge(
            failed=failed,
            unanchored=self.unanchored,
            trusted=self.trusted,
            allow_unanchored=allow_unanchored,
            stale=bool(self.stale),
        )

    @property
    def ok(self) -> bool:
        """True only for :attr:`BundleVerdict.VERIFIED`: trusted key, fully anchored."""
        return self.verdict() is BundleVerdict.VERIFIED


class BundleVerifier:
    """Checks a bundle in two passes: :meth:`files` (manifest, digests, keys, signature), then
    :meth:`sagas` (rows against chains, checkpoints and the manifest).

    ``public_key`` is the key the verifier trusts; every signature must be made with it. Else a
    ``trust`` file's signer whose fingerprint the manifest names. Without either the bundle's
    own ``public_key.pem`` is used, which proves only that the bundle is consistent with itself
    (:attr:`BundleVerdict.UNTRUSTED`). ``trust``'s witnesses and quorum are required of the
    bundle's tree head. ``not_older_than`` and ``newer`` (a newer signed tree head note, or the
    log's ``checkpoints.jsonl``) decide whether the bundle still counts as current at ``now``.
    """

    def __init__(
        self,
        path: Path,
        *,
        public_key: Ed25519PublicKey | None = None,
        keyring: Keyring | None = None,
        trust: TrustRoots | None = None,
        not_older_than: timedelta | None = None,
        newer: str | None = None,
        now: datetime | None = None,
    ) -> None:
        self.path = path
        #: the keyring decisions are checked with: the verifier's, else the bundle's own
        #: (as trusted as the manifest signature that covers it)
        self.keyring = keyring
        self.problems: list[str] = []
        self.manifest: dict[str, Any] = {}
        self.key: Ed25519PublicKey | None = public_key
        self.key_id: str | None = None if public_key is None else key_id(public_key)
        self.trusted = public_key is not None
        #: sagas with rows but no signed checkpoint in the bundle
        self.unanchored_sagas: list[str] = []
        self.trust = trust
        self.not_older_than = not_older_than
        self.newer = newer
        self.now = now or datetime.now(UTC)
        #: the log's tree head the bundle carries (set once the key is known)
        self.head: CarriedHead | None = None
        self.freshness: Freshness | None = None
        self.stale: list[str] = []
        self.notes: list[str] = []
        #: lines of ``journal.jsonl`` read, faulty or not
        self.rows = 0
        self._signed = False

    def files(self) -> list[str]:
        """Problems with the manifest, the files it lists, the keys and the signature."""
        self.problems = []
        try:
            raw = (self.path / MANIFEST).read_bytes()
            manifest = parse_json(raw.decode("utf-8"))
        except (OSError, ValueError) as exc:
            self.problems.append(f"{MANIFEST}: unreadable: {exc}")
            return self.problems
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            self.problems.append(f"{MANIFEST}: not a {FORMAT} manifest")
            return self.problems
        if manifest.get("version") not in _READABLE:
            self.problems.append(
                f"{MANIFEST}: version {manifest.get('version')!r} is not one this verifier "
                f"reads ({', '.join(map(str, _READABLE))})"
            )
            return self.problems
        shape = _shape_problem(manifest)
        if shape is not None:
            self.problems.append(f"{MANIFEST}: {shape}")
            return self.problems
        self.manifest = manifest
        self._check_digests(manifest["files"])
        self._check_key(manifest.get("key_id"))
        self._check_signature(raw)
        self._check_claims(manifest)
        if self.key is not None:
            self.head = CarriedHead(self.path, self.key, self.trust)
            self.head.read(manifest.get("tlog"))
            fresh = self.head.freshness(manifest, signed=self._signed, trusted=self.trusted)
            self.freshness, self.stale, self.notes = self.head.current(
                fresh, not_older_than=self.not_older_than, newer=self.newer, now=self.now
            )
            self.problems += self.head.problems
        if self.keyring is None and (self.path / KEYRING).is_file():
            try:
                self.keyring = load_keyring(self.path / KEYRING)
            except EvidenceUnavailable as exc:
                self.problems.append(f"{KEYRING}: {exc}")
        return self.problems

    def _check_digests(self, listed: dict[str, Any]) -> None:
        present = {
            p.relative_to(self.path).as_posix()
            for p in self.path.rglob("*")
            if p.is_file() and p.name not in (MANIFEST, SIGNATURE)
        }
        for name in sorted(present - set(listed)):
            self.problems.append(f"{name}: not listed in the manifest (added after export)")
        for name, expected in sorted(listed.items()):
            if name not in present:
                self.problems.append(f"{name}: listed in the manifest but missing")
                continue
            path = self.path / name
            want = expected if isinstance(expected, dict) else {}
            actual = file_sha256(path)
            if actual != want.get("sha256"):
                self.problems.append(
                    f"{name}: SHA-256 is {actual[:16]}… but the manifest says "
                    f"{str(want.get('sha256'))[:16]}…: the file or the manifest was changed "
                    "after export"
                )
            elif path.stat().st_size != want.get("bytes"):
                self.problems.append(
                    f"{name}: {path.stat().st_size} bytes but the manifest says "
                    f"{want.get('bytes')!r}: the manifest was changed after export"
                )

    def _check_key(self, listed_id: object) -> None:
        bundled = None
        key_file = self.path / PUBLIC_KEY
        if key_file.is_file():
            try:
                bundled = load_public_key(key_file)
            except EvidenceUnavailable as exc:
                self.problems.append(f"{PUBLIC_KEY}: {exc}")
            else:
                if listed_id != key_id(bundled):
                    self.problems.append(
                        f"{PUBLIC_KEY}: fingerprint {key_id(bundled)} is not the manifest's "
                        f"{listed_id}"
                    )
        if self.trusted:
            if bundled is not None and key_id(bundled) != self.key_id:
                self.problems.append(
                    f"{PUBLIC_KEY}: the bundle's key {key_id(bundled)} is not the key you "
                    f"trust ({self.key_id})"
                )
            elif listed_id is not None and listed_id != self.key_id:
                self.problems.append(
                    f"{MANIFEST}: the bundle names key {listed_id}, not the key you trust "
                    f"({self.key_id})"
                )
            return
        if self.trust is not None:
            pinned = [s.key for s in self.trust.signers if s.key_id == listed_id]
            self.trusted = True
            if listed_id is None:
                return  # nothing in the bundle is signed: it is refused as unanchored
            if not pinned:
                pins = ", ".join(s.key_id for s in self.trust.signers)
                self.problems.append(
                    f"{MANIFEST}: the bundle names key {listed_id}, which the trust file does not "
                    f"pin ({pins})"
                )
                return
            self.key, self.key_id = pinned[0], str(listed_id)
            return
        self.key = bundled
        self.key_id = None if bundled is None else key_id(bundled)
        signed = (self.path / CHECKPOINTS).is_dir() or (self.path / SIGNATURE).exists()
        if bundled is None and signed and not key_file.is_file():
            self.problems.append(
                f"{PUBLIC_KEY}: missing, and no trusted key was given: the bundle's "
                "signatures cannot be checked"
            )

    def _check_signature(self, manifest: bytes) -> None:
        file = self.path / SIGNATURE
        if not file.exists():
            return
        try:
            raw = parse_json(file.read_bytes().decode("utf-8"))
            if not isinstance(raw, dict) or set(raw) != {"key_id", "signature"}:
                raise ValueError("not an object with exactly key_id and signature")
            signer, signature = raw["key_id"], base64.b64decode(raw["signature"], validate=True)
        except (OSError, ValueError, TypeError, binascii.Error) as exc:
            self.problems.append(f"{SIGNATURE}: damaged: {exc}")
            return
        if self.key is None:
            return  # _check_key said why
        whose = "the key you trust" if self.trusted else "the bundle's key"
        if signer != self.key_id:
            self.problems.append(
                f"{SIGNATURE}: signed by key {signer}, not by {whose} {self.key_id}"
            )
            return
        try:
            self.key.verify(signature, SIGNATURE_DOMAIN + manifest)
        except InvalidSignature:
            self.problems.append(
                f"{SIGNATURE}: the signature does not verify with {whose} {self.key_id}: "
                f"{MANIFEST} or {SIGNATURE} was changed after export"
            )
            return
        self._signed = True

    def _check_claims(self, manifest: dict[str, Any]) -> None:
        """Anchors the manifest says it carries must be there: stripping one is tampering."""
        claimed = manifest.get("anchors", [])
        if "checkpoints" in claimed and not (self.path / CHECKPOINTS).is_dir():
            self.problems.append(
                f"{CHECKPOINTS}: the manifest says the bundle has signed checkpoints, but there "
                "are none: they were removed after export"
            )
        if "signature" in claimed and not (self.path / SIGNATURE).exists():
            self.problems.append(
                f"{SIGNATURE}: the manifest says it was signed, but there is no signature: "
                "removed after export"
            )
        if "tlog" in claimed and not (self.path / HEAD).is_file():
            self.problems.append(
                f"{HEAD}: the manifest says the bundle has the log's tree head, but there is "
                "none: removed after export"
            )

    @property
    def unanchored(self) -> list[str]:
        """What this bundle's anchors leave undetectable (complete once :meth:`sagas` ran)."""
        found = [] if self._signed else [NO_SIGNATURE]
        short = None if self.head is None else self.head.short()
        if short is not None:
            found.append(short)
        if self.unanchored_sagas:
            names = ", ".join(repr(s) for s in self.unanchored_sagas[:5])
            more = len(self.unanchored_sagas) - 5
            if more > 0:
                names += f" and {more} more"
            plural = "s" if len(self.unanchored_sagas) > 1 else ""
            found.append(f"no signed checkpoint for saga{plural} {names}: {NO_CHECKPOINTS}")
        return found

    def sagas(self) -> Iterator[SagaReport]:
        """One report per saga, streaming ``journal.jsonl``; file-level finds go to ``problems``."""
        listed = {str(s.get("saga_id")): s for s in self.manifest.get("sagas", [])}
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
        for saga_id in sorted(set(self.head.proofs if self.head else ()) - set(listed)):
            self.problems.append(f"{LOG_PROOFS}: saga {saga_id!r} is not in the manifest")

    def _entries(self) -> Iterator[Entry]:
        """The rows in file order; undecodable lines become problems and are skipped."""
        try:
            lines = (self.path / JOURNAL).open("rb")
        except OSError as exc:
            if self.manifest.get("sagas"):
                self.problems.append(f"{JOURNAL}: unreadable: {exc}")
            return
        after = "the first row"
        with lines:
            for number, raw in enumerate(lines, start=1):
                self.rows += 1
                try:
                    entry = entry_from_line(raw.decode("utf-8"))
                except (UnicodeDecodeError, ValueError) as exc:
                    self.problems.append(
                        f"{JOURNAL} line {number} ({after}): not a journal row: {exc}"
                    )
                    continue
                after = f"after saga {entry.saga_id!r} seq {entry.seq}"
                yield entry

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
        decisions = None if self.keyring is None else DecisionCheck(saga_id, self.keyring)
        proof = None if self.head is None else self.head.proofs.get(saga_id)
        count, last, null = 0, None, None
        for entry in rows:
            # every row is read, past a chain fault too: anchors and the manifest need the tail
            verifier.feed(entry)
            if decisions is not None:
                decisions.feed(entry)
            count, last = count + 1, entry
            if entry.seq in wanted or (proof is not None and entry.seq == proof.seq):
                stored.setdefault(entry.seq, entry.hash)
            if null is None:
                null = _null_check(entry)
        # the report counts every row of the saga, not only those up to the chain's first fault
        verdict = replace(verifier.verdict(), rows=count)
        checks = [_manifest_check(listed, count, last)]
        if null is not None:
            checks.append(null)
        if not wanted and not log.problems:
            if count:
                # not a fault of this saga: the bundle's verdict weighs what anchors lack
                self.unanchored_sagas.append(saga_id)
                detail = f"no signed checkpoint of this saga in the bundle: {NO_CHECKPOINTS}"
                checks.append(AnchorCheck(Source.CHECKPOINT, Agreement.MISSING, detail))
        else:
            checks += settle(checkpoint_probe(log, verdict), stored.get)
        logged = None if self.head is None else self.head.check(saga_id, stored, last)
        if logged is not None:
            checks.append(logged)
        notes = []
        if decisions is not None:
            checks += decision_checks(decisions)
            notes = decision_notes(decisions)
        return saga_report(verdict, checks, notes)


def _null_check(entry: Entry) -> AnchorCheck | None:
    """A fault when a text field holds U+0000: how a SQL NULL is exported (no stored text can
    hold it, and the table refuses NULL), so the table was altered."""
    for name in ("tool_name", "phase", "input", "payload"):
        if "\x00" in str(getattr(entry, name)):
            detail = f"{name} is NULL in the journal (exported as \\u0000): the table was altered"
            return AnchorCheck(Source.CHAIN, Agreement.INVALID, detail, entry.seq, fatal=True)
    return None


def _shape_problem(manifest: dict[str, Any]) -> str | None:
    """Why the manifest's fields cannot be used as a manifest's, or None."""
    if not isinstance(manifest.get("files"), dict):
        return "files is not an object"
    sagas = manifest.get("sagas")
    if not isinstance(sagas, list) or not all(isinstance(s, dict) for s in sagas):
        return "sagas is not a list of objects"
    anchors = manifest.get("anchors", [])
    if not isinstance(anchors, list) or not all(isinstance(a, str) for a in anchors):
        return "anchors is not a list of names"
    return None


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


def verify_bundle(
    path: Path,
    *,
    public_key: Ed25519PublicKey | None = None,
    trust: TrustRoots | None = None,
    not_older_than: timedelta | None = None,
    newer: str | None = None,
    now: datetime | None = None,
) -> BundleReport:
    """Verify a whole bundle and collect the findings (the CLI streams instead).

    ``public_key`` (or a ``trust`` file's signer) is the key the verifier trusts; without one
    the verdict is at best :attr:`BundleVerdict.UNTRUSTED`. See :class:`BundleVerifier` for the
    rest.
    """
    verifier = BundleVerifier(
        path,
        public_key=public_key,
        trust=trust,
        not_older_than=not_older_than,
        newer=newer,
        now=now,
    )
    verifier.files()
    sagas = list(verifier.sagas()) if verifier.manifest else []
    return BundleReport(
        path,
        verifier.key_id,
        verifier.trusted,
        verifier.problems,
        sagas,
        verifier.unanchored if verifier.manifest else [],
        verifier.rows,
        verifier.freshness,
        verifier.stale,
        verifier.notes,
    )
