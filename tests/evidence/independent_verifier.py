"""A verifier of a live Sagacity journal written from docs/hash-rules.md, docs/evidence.md ("For
implementers") and docs/decisions.md alone: it imports nothing of Sagacity.

It reads what an auditor is handed: the journal and the log's leaf table (plain ``SELECT``s), the
checkpoint folder (per-saga logs and ``tlog/checkpoints.jsonl``) and the trust file the auditor
pinned. It reports findings as ``(saga_id, seq, what, fatal)`` so a test can compare them with
what ``sagacity verify --all`` and ``sagacity log verify`` name. It also checks the published
test vectors (``tests/evidence/vectors/``). Standard library plus ``cryptography`` (Ed25519).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import struct
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

Row = Mapping[str, Any]

# --- hash-rules.md: rows and the chain ---------------------------------------------------------

GENESIS = "0" * 64
ROW_TAG = b"sagacity-journal-v1\n"
FIELDS = ("saga_id", "seq", "tool_name", "phase", "input", "payload", "timestamp")
#: the journal as hash-rules.md says to read it: the hashed timestamp text, the hash as stored
SELECT_JOURNAL = """
SELECT saga_id, seq, tool_name, phase, input, payload,
       to_char(timestamp, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS timestamp, hash
FROM side_effect_journal
ORDER BY saga_id, seq
"""
SELECT_LEAVES = "SELECT idx, saga_id, seq, row_hash FROM sagacity_tlog_leaf ORDER BY idx"


def netstring(text: str) -> bytes:
    raw = text.encode("utf-8")
    return str(len(raw)).encode("ascii") + b":" + raw + b","


def row_message(prev_hash: str, row: Row) -> bytes:
    return ROW_TAG + b"".join(netstring(f) for f in [prev_hash] + [str(row[n]) for n in FIELDS])


def row_hash(prev_hash: str, row: Row) -> str | None:
    """The row's digest, or None when a hashed column is NULL (not a journal row)."""
    if any(row[name] is None for name in FIELDS):
        return None
    return hashlib.sha256(row_message(prev_hash, row)).hexdigest()


def first_bad_seq(rows: Sequence[Row]) -> int | None:
    """The seq of the first row (in seq order) that breaks the chain, or None."""
    prev = GENESIS
    for expected, row in enumerate(rows, start=1):
        if int(row["seq"]) != expected or row_hash(prev, row) != row["hash"]:
            return int(row["seq"])
        prev = row["hash"]
    return None


# --- evidence.md: checkpoints -----------------------------------------------------------------

CHECKPOINT_TAG = b"sagacity-checkpoint-v1\n"
KINDS = ("head", "sealed", "purged")
REQUIRED = ("saga_id", "seq", "hash", "at", "kind", "key_id", "signature")
OPTIONAL = ("bundle", "state")


def canonical(value: Any) -> str:
    """Sorted keys, no whitespace, non-ASCII as itself, the JSON escapes of evidence.md."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def fingerprint(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()[:16]


def checkpoint_file_name(saga_id: str) -> str:
    name = quote(saga_id, safe="")
    if len(name) > 150:
        name = "+" + hashlib.sha256(saga_id.encode("utf-8")).hexdigest()
    return name + ".jsonl"


def signed_body(line: Mapping[str, Any]) -> dict[str, Any]:
    body = {name: line[name] for name in REQUIRED if name != "signature"}
    body["bundle"] = line.get("bundle")
    if isinstance(line.get("state"), str):
        body["state"] = line["state"]
    return body


def checkpoint_message(line: Mapping[str, Any]) -> bytes:
    return CHECKPOINT_TAG + canonical(signed_body(line)).encode("utf-8")


def parse_checkpoint(text: str) -> dict[str, Any] | None:
    """A checkpoint line's object, or None when the line is damaged."""
    try:
        line = json.loads(text)
    except ValueError:
        return None
    if not isinstance(line, dict) or any(name not in line for name in REQUIRED):
        return None
    if set(line) - set(REQUIRED) - set(OPTIONAL) or line["kind"] not in KINDS:
        return None
    seq = line["seq"]
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
        return None
    if not all(isinstance(line[n], str) for n in REQUIRED if n != "seq"):
        return None
    if (line["kind"] == "sealed") != isinstance(line.get("state"), str):
        return None
    return line


def strict_b64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def checkpoint_verifies(line: Mapping[str, Any], signers: Mapping[str, Ed25519PublicKey]) -> bool:
    key = signers.get(line["key_id"])
    if key is None:
        return False
    try:
        key.verify(strict_b64(line["signature"]), checkpoint_message(line))
    except (InvalidSignature, binascii.Error, ValueError):
        return False
    return True


# --- evidence.md: the transparency log --------------------------------------------------------

LEAF_TAG = b"sagacity-tlog-leaf-v1\n"
EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(saga_id: str, seq: int, row_hash_text: str) -> bytes:
    data = LEAF_TAG + netstring(saga_id) + netstring(str(seq)) + netstring(row_hash_text)
    return hashlib.sha256(b"\x00" + data).digest()


def node(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def mth(leaves: Sequence[bytes]) -> bytes:
    """RFC 9162 §2.1.1 Merkle tree hash of leaf hashes."""
    if not leaves:
        return EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return node(mth(leaves[:k]), mth(leaves[k:]))


def inclusion_ok(leaf: bytes, index: int, size: int, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 §2.1.3.2."""
    if not 0 <= index < size:
        return False
    fn, sn, r = index, size - 1, leaf
    for p in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            r = node(p, r)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            r = node(r, p)
        fn, sn = fn >> 1, sn >> 1
    return sn == 0 and r == root


def consistency_ok(
    old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]
) -> bool:
    """RFC 9162 §2.1.4.2."""
    if old == new:
        return not proof and old_root == new_root
    if not 0 < old < new or not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            fr, sr = node(c, fr), node(c, sr)
            while not fn & 1 and fn != 0:
                fn, sn = fn >> 1, sn >> 1
        else:
            sr = node(sr, c)
        fn, sn = fn >> 1, sn >> 1
    return fr == old_root and sr == new_root and sn == 0


def note_key_id(name: str, kind: int, raw: bytes) -> bytes:
    return hashlib.sha256(name.encode("utf-8") + b"\n" + bytes([kind]) + raw).digest()[:4]


@dataclass
class Note:
    origin: str
    size: int
    root: bytes
    text: str
    signed_by: bytes | None = None  # the raw key of the trusted signer whose signature verified
    cosigned: dict[str, int] = field(default_factory=dict)  # witness name -> cosignature time


def open_note(note: str, signers: Sequence[bytes], witnesses: Mapping[str, bytes]) -> Note | None:
    """The note's head and who signed it; None when it is not a well-formed signed note, or a
    signature line of a known key does not verify."""
    split = note.rfind("\n\n")
    if split < 0 or not note.endswith("\n"):
        return None
    text, sig_lines = note[: split + 1], note[split + 2 : -1].split("\n")
    parts = text.split("\n")
    if len(parts) != 4:
        return None
    origin, size_text, root_text = parts[:3]
    try:
        root = strict_b64(root_text)
    except (binascii.Error, ValueError):
        return None
    if not size_text.isdigit() or len(root) != 32:
        return None
    opened = Note(origin, int(size_text), root, text)
    for line in sig_lines:
        if not line.startswith("\u2014 "):
            return None
        name, _, b64 = line[2:].partition(" ")
        try:
            raw = strict_b64(b64)
        except (binascii.Error, ValueError):
            return None
        ident, sig = raw[:4], raw[4:]
        for key in signers:
            if name == origin and ident == note_key_id(name, 0x01, key):
                if not _verifies(key, sig, text.encode("utf-8")):
                    return None
                opened.signed_by = key
        if name in witnesses and ident == note_key_id(name, 0x04, witnesses[name]):
            if len(sig) != 72:
                return None
            (stamp,) = struct.unpack(">Q", sig[:8])
            message = f"cosignature/v1\ntime {stamp}\n{text}".encode()
            if not _verifies(witnesses[name], sig[8:], message):
                return None
            opened.cosigned[name] = stamp
    return opened


def _verifies(raw: bytes, signature: bytes, message: bytes) -> bool:
    try:
        Ed25519PublicKey.from_public_bytes(raw).verify(signature, message)
    except InvalidSignature:
        return False
    return True


# --- the trust file the auditor pinned -------------------------------------------------------


@dataclass
class Trust:
    signers: dict[str, Ed25519PublicKey]  # by checkpoint fingerprint
    signer_raw: list[bytes]
    witnesses: dict[str, bytes]
    quorum: int


def load_trust(path: Path) -> Trust:
    doc = json.loads(path.read_text(encoding="utf-8"))
    if doc.get("format") != "sagacity-trust" or doc.get("version") != 1:
        raise ValueError("not a sagacity-trust file of version 1")
    raws = [strict_b64(s["public_key"]) for s in doc["signers"]]
    keys = {fingerprint(raw): Ed25519PublicKey.from_public_bytes(raw) for raw in raws}
    witnesses = {w["name"]: strict_b64(w["public_key"]) for w in doc.get("witnesses", [])}
    return Trust(keys, raws, witnesses, int(doc.get("witness_quorum", 0)))


# --- verify --all -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Finding:
    saga_id: str | None
    seq: int | None
    what: str
    fatal: bool = True


class CheckpointLog:
    """One saga's checkpoint file, read by evidence.md's rules; signatures checked lazily, in
    the order the rules give, because a line found invalid on the way is a fault."""

    def __init__(self, saga_id: str, folder: Path, trust: Trust) -> None:
        self.saga_id = saga_id
        self.faults: list[Finding] = []
        self._trust = trust
        self._verdicts: dict[int, bool] = {}
        lines: list[dict[str, Any]] = []
        file = folder / checkpoint_file_name(saga_id)
        if file.exists():
            try:
                text = file.read_bytes().decode("utf-8")
            except UnicodeDecodeError:
                text = ""
                self.faults.append(Finding(saga_id, None, "unreadable checkpoint file"))
            for raw in text.split("\n"):
                if not raw:
                    continue
                line = parse_checkpoint(raw)
                if line is None:
                    self.faults.append(Finding(saga_id, None, "damaged checkpoint line"))
                elif line["saga_id"] != saga_id:
                    self.faults.append(Finding(saga_id, None, "a checkpoint of another saga"))
                else:
                    lines.append(line)
        self.lines = sorted(lines, key=lambda ln: int(ln["seq"]))  # stable: file order kept

    def valid(self, index: int) -> bool:
        if index not in self._verdicts:
            ok = checkpoint_verifies(self.lines[index], self._trust.signers)
            if not ok:
                self.faults.append(
                    Finding(self.saga_id, None, "checkpoint not signed by a pinned key")
                )
            self._verdicts[index] = ok
        return self._verdicts[index]

    def latest(self) -> dict[str, Any] | None:
        for index in reversed(range(len(self.lines))):
            if self.valid(index):
                return self.lines[index]
        return None

    def seal(self) -> dict[str, Any] | None:
        ceiling: int | None = None
        for index in reversed(range(len(self.lines))):
            line = self.lines[index]
            if ceiling is not None and line["seq"] < ceiling:
                return None
            if line["kind"] == "sealed" and self.valid(index):
                return line
            if line["kind"] == "head" and ceiling is None and self.valid(index):
                ceiling = line["seq"]
        return None

    def one_per_seq(self) -> list[dict[str, Any]]:
        by_seq: dict[int, dict[str, Any]] = {}
        for index, line in enumerate(self.lines):
            if not self.valid(index):
                continue
            held = by_seq.get(line["seq"])
            if held is not None and held["hash"] != line["hash"]:
                self.faults.append(Finding(self.saga_id, None, "two signed hashes for one seq"))
            elif held is None or line["kind"] == "purged":
                by_seq[line["seq"]] = line
        return list(by_seq.values())


def checkpoint_findings(
    saga_id: str, rows: Sequence[Row], chain_ok: bool, folder: Path, trust: Trust
) -> list[Finding]:
    """evidence.md "For implementers: deciding a saga's checkpoints"."""
    log = CheckpointLog(saga_id, folder, trust)
    stored = {int(r["seq"]): r["hash"] for r in rows}
    found: list[Finding] = []
    latest = log.latest()
    if latest is None:
        if rows and not log.faults:
            found.append(Finding(saga_id, None, "no signed checkpoint"))
        elif not rows and not log.faults:
            found.append(Finding(saga_id, None, "no rows and no checkpoint"))
    elif latest["kind"] == "purged" and not rows:
        pass
    elif latest["seq"]:
        top = log.seal() or latest
        if stored.get(top["seq"]) == top["hash"]:
            after = sorted(seq for seq in stored if seq > top["seq"])
            if top["kind"] == "sealed" and after:
                found.append(Finding(saga_id, after[0], "row after the seal"))
        else:
            anchors = [line for line in log.one_per_seq() if line["seq"]]
            low, high = 0, len(anchors) - 1
            while low < high:
                mid = (low + high) // 2
                if stored.get(anchors[mid]["seq"]) == anchors[mid]["hash"]:
                    low = mid + 1
                else:
                    high = mid
            found.append(Finding(saga_id, anchors[high]["seq"], "checkpoint disagrees"))
    return log.faults + found


def verify_all(
    rows: Iterable[Row], folder: Path, trust: Trust, log: Sequence[Finding] = ()
) -> dict[str, list[Finding]]:
    """Each saga's fatal findings, chain first, then its checkpoints', then the log's (``log``:
    what :func:`verify_log` found, when the log has an accepted head): every saga of the
    journal, every saga with a checkpoint file, and every saga the log names."""
    sagas: dict[str, list[Row]] = {}
    for row in rows:
        sagas.setdefault(str(row["saga_id"]), []).append(row)
    by_saga: dict[str, list[Finding]] = {}
    for finding in log:
        if finding.fatal and finding.saga_id is not None:
            by_saga.setdefault(finding.saga_id, []).append(finding)
            sagas.setdefault(finding.saga_id, [])
    for file in sorted(folder.glob("*.jsonl")):
        stem = file.name.removesuffix(".jsonl")
        if not stem.startswith("+"):
            sagas.setdefault(unquote(stem), [])
            continue
        for text in file.read_text(encoding="utf-8").split("\n"):
            line = parse_checkpoint(text) if text else None
            if line is not None:
                sagas.setdefault(line["saga_id"], [])
                break
        else:
            sagas.setdefault(stem, [])
    report: dict[str, list[Finding]] = {}
    for saga_id, saga_rows in sagas.items():
        saga_rows.sort(key=lambda r: int(r["seq"]))
        bad = first_bad_seq(saga_rows)
        chain = [] if bad is None else [Finding(saga_id, bad, "chain")]
        report[saga_id] = (
            chain
            + checkpoint_findings(saga_id, saga_rows, bad is None, folder, trust)
            + sorted(by_saga.get(saga_id, []), key=lambda f: f.seq or 0)
        )
    return report


# --- log verify ---------------------------------------------------------------------------------


def _when(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ")


def attested(saga_rows: Mapping[int, Row], seq: int, log: CheckpointLog) -> bool:
    """evidence.md "The sequencer": a checkpoint verifying with a trusted key at seq' >= seq,
    hashed as the journal's row seq', the chain verifying from row seq to row seq'."""
    for index in reversed(range(len(log.lines))):
        line = log.lines[index]
        top = int(line["seq"])
        if top < seq:
            return False
        if saga_rows.get(top, {}).get("hash") != line["hash"] or not log.valid(index):
            continue
        prev = GENESIS if seq == 1 else saga_rows.get(seq - 1, {}).get("hash")
        for k in range(seq, top + 1):
            row = saga_rows.get(k)
            if prev is None or row is None or row_hash(prev, row) != row["hash"]:
                break
            prev = row["hash"]
        else:
            return True
    return False


def verify_log(
    rows: Iterable[Row],
    leaves: Sequence[Row],
    folder: Path,
    trust: Trust,
    grace: timedelta = timedelta(seconds=600),
    now: datetime | None = None,
) -> list[Finding]:
    """evidence.md "For implementers: the transparency log": the published heads (signed by a
    pinned key, one origin, each consistent with the one before by its stored proof, the
    latest cosigned by the quorum of pinned witnesses), the leaf table's root at every head,
    each leaf against the journal (rewritten, deleted unless purged, backdated), and each
    journal row the log lacks (unattested or withheld past the grace, else pending)."""
    now = now or datetime.now(UTC).replace(tzinfo=None)  # naive UTC, as the rows' times
    findings: list[Finding] = []
    heads: list[tuple[Note, datetime]] = []
    history = folder / "tlog" / "checkpoints.jsonl"
    text = history.read_text(encoding="utf-8") if history.exists() else ""
    for raw in text.split("\n"):
        if not raw:
            continue
        try:
            line = json.loads(raw)
            note = open_note(line["note"], trust.signer_raw, trust.witnesses)
            proof = [strict_b64(p) for p in line["consistency"]]
            at = _when(line["at"])
        except (ValueError, KeyError, TypeError):
            note = None
        if note is None or note.signed_by is None:
            findings.append(Finding(None, None, "a tree head not signed by a pinned key"))
            continue
        if heads:
            old = heads[-1][0]
            if (
                note.origin != old.origin
                or note.size < old.size
                or (
                    old.size and not consistency_ok(old.size, note.size, old.root, note.root, proof)
                )
            ):
                findings.append(
                    Finding(None, None, "a tree head not consistent with the one before")
                )
                continue
        if note.size == 0 and note.root != EMPTY_ROOT:
            findings.append(Finding(None, None, "tree head 0 without the empty root"))
            continue
        heads.append((note, at))
    # the quorum binds the latest head: every earlier one is a prefix of it by the proofs above
    if trust.quorum and heads and len(heads[-1][0].cosigned) < trust.quorum:
        findings.append(Finding(None, None, "the latest tree head without its witnesses' quorum"))
    journal = {(str(r["saga_id"]), int(r["seq"])): r for r in rows}
    by_saga: dict[str, dict[int, Row]] = {}
    for (saga_id, seq), row in journal.items():
        by_saga.setdefault(saga_id, {})[seq] = row
    logs: dict[str, CheckpointLog] = {}

    def checkpoints(saga_id: str) -> CheckpointLog:
        if saga_id not in logs:
            logs[saga_id] = CheckpointLog(saga_id, folder, trust)
        return logs[saga_id]

    digests = []
    # backdated leaves, by saga, until a later leaf of the saga first held by the same head
    # clears them: (first head's index in `heads`, findings)
    suspects: dict[str, list[Finding]] = {}
    suspects_head: int | None = None
    for expected, leaf in enumerate(leaves):
        if int(leaf["idx"]) != expected:
            findings.append(Finding(None, None, "leaves missing from the leaf table"))
            break
        saga_id, seq = str(leaf["saga_id"]), int(leaf["seq"])
        digests.append(leaf_hash(saga_id, seq, leaf["row_hash"]))
        first = next((n for n, (h, _) in enumerate(heads) if h.size > expected), None)
        if first != suspects_head:
            findings += [f for held in suspects.values() for f in held]
            suspects, suspects_head = {}, first
        stored = journal.get((saga_id, seq))
        if stored is None:
            latest = checkpoints(saga_id).latest()
            if not (latest and latest["kind"] == "purged" and int(latest["seq"]) >= seq):
                findings.append(Finding(saga_id, seq, "logged but gone from the journal"))
        elif stored["hash"] != leaf["row_hash"]:
            findings.append(Finding(saga_id, seq, "rewritten after it was logged"))
        else:
            before = None
            if first is not None:
                earlier = [at for h, at in heads[:first] if h.size <= expected]
                before = earlier[-1] if earlier else None
            if before is not None and _when(stored["timestamp"]) < before - grace:
                suspects.setdefault(saga_id, []).append(Finding(saga_id, seq, "backdated"))
            else:
                kept = [f for f in suspects.pop(saga_id, []) if (f.seq or 0) > seq]
                if kept:
                    suspects[saga_id] = kept
    findings += [f for held in suspects.values() for f in held]
    for note, _ in heads:
        if note.size > len(digests):
            findings.append(Finding(None, None, "a tree head has more leaves than the log holds"))
        elif mth(digests[: note.size]) != note.root:
            findings.append(Finding(None, None, "the leaf table disagrees with a tree head"))
            break
    logged = {(str(leaf["saga_id"]), int(leaf["seq"])) for leaf in leaves}
    cutoff = heads[-1][1] - grace if heads else None
    for key, row in journal.items():
        if key in logged:
            continue
        when = _when(row["timestamp"])
        if not attested(by_saga[key[0]], key[1], checkpoints(key[0])):
            late = abs(when - now) > grace
            findings.append(Finding(key[0], key[1], "unattested" if late else "pending", late))
        else:
            withheld = cutoff is not None and when < cutoff
            findings.append(
                Finding(key[0], key[1], "withheld" if withheld else "pending", withheld)
            )
    return findings


# --- evidence.md "Proof bundles": one saga's rows and their inclusion proofs ----------------

PROOF_FILES = {"manifest.json", "checkpoint", "rows.jsonl", "proofs.jsonl"}


def check_proof(folder: Path, trust: Trust) -> list[Finding]:
    """A proof bundle's faults: the files, the manifest, the head's signature by a pinned key,
    then row by row (with its proof, line for line) the chain and the inclusion proof; the first
    bad row ends it."""
    if {p.name for p in folder.iterdir()} != PROOF_FILES:
        return [Finding(None, None, "not the four files of a proof bundle")]
    manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    if (manifest.get("format"), manifest.get("version")) != ("sagacity-saga-proof", 1):
        return [Finding(None, None, "not a sagacity-saga-proof manifest")]
    note = open_note((folder / "checkpoint").read_text(encoding="utf-8"), trust.signer_raw, {})
    if note is None or note.signed_by is None:
        return [Finding(None, None, "the tree head is not signed by a pinned key")]
    saga_id = str(manifest.get("saga_id"))
    found = []
    if manifest.get("tree_size") != note.size:
        found.append(Finding(saga_id, None, "tree_size is not the head's"))
    rows = (folder / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    proofs = (folder / "proofs.jsonl").read_text(encoding="utf-8").splitlines()
    prev, count = GENESIS, 0
    for count, (row_text, proof_text) in enumerate(zip(rows, proofs, strict=False), start=1):
        row, proof = json.loads(row_text), json.loads(proof_text)
        if row["saga_id"] != saga_id or row["seq"] != count or row_hash(prev, row) != row["hash"]:
            return [*found, Finding(saga_id, row["seq"], "chain")]
        if proof["seq"] != row["seq"]:
            return [*found, Finding(saga_id, row["seq"], "the proof of another row")]
        leaf = leaf_hash(saga_id, row["seq"], row["hash"])
        hashes = [strict_b64(h) for h in proof["hashes"]]
        if not inclusion_ok(leaf, proof["leaf_index"], note.size, hashes, note.root):
            found.append(Finding(saga_id, row["seq"], "inclusion proof"))
        prev = row["hash"]
    if len(rows) != len(proofs):
        found.append(Finding(saga_id, None, "rows and proofs differ in number"))
    elif manifest.get("rows") != count and not found:
        found.append(Finding(saga_id, None, "the manifest's row count"))
    return found


# --- the published vectors -------------------------------------------------------------------


def check_vectors(folder: Path) -> list[str]:
    """Every vector file's expectations recomputed by the rules; the failures, by name."""
    fail: list[str] = []
    load: Callable[[str], Any] = lambda name: json.loads((folder / name).read_text("utf-8"))  # noqa: E731
    keys = load("keys.json")
    raw = {name: strict_b64(k["public_key"]) for name, k in keys.items()}
    for name, key in keys.items():
        if fingerprint(raw[name]) != key["key_id"]:
            fail.append(f"keys: fingerprint of {name}")

    rows = load("rows.json")
    for saga in rows["sagas"]:
        prev = rows["genesis"]
        for row in saga["rows"]:
            if row["prev_hash"] != prev or row_message(prev, row).hex() != row["message_hex"]:
                fail.append(f"rows: message of {saga['case']} seq {row['seq']}")
            if row_hash(prev, row) != row["hash"]:
                fail.append(f"rows: hash of {saga['case']} seq {row['seq']}")
            prev = row["hash"]
        if first_bad_seq(saga["rows"]) is not None:
            fail.append(f"rows: chain of {saga['case']}")
    for case in rows["invalid"]:
        if first_bad_seq([case["row"]]) is None:
            fail.append(f"rows: accepted {case['case']}")

    cps = load("checkpoints.json")
    signers = {cps["signer"]["key_id"]: Ed25519PublicKey.from_public_bytes(raw["signer"])}
    for case in cps["checkpoints"]:
        line = parse_checkpoint(case["line"])
        if line is None:
            fail.append(f"checkpoints: {case['case']}: line damaged")
            continue
        if checkpoint_file_name(case["saga_id"]) != case["file"]:
            fail.append(f"checkpoints: {case['case']}: file name")
        if checkpoint_message(line).hex() != case["signed_message_hex"]:
            fail.append(f"checkpoints: {case['case']}: signed message")
        if canonical({**signed_body(line), "signature": line["signature"]}) != case["line"]:
            fail.append(f"checkpoints: {case['case']}: line text")
        if not checkpoint_verifies(line, signers):
            fail.append(f"checkpoints: {case['case']}: signature")

    tree = load("merkle.json")
    leaves = []
    for leaf in tree["leaves"]:
        digest = leaf_hash(leaf["saga_id"], leaf["seq"], leaf["row_hash"])
        if b64(digest) != leaf["leaf_hash"]:
            fail.append(f"merkle: leaf {leaf['seq']}")
        leaves.append(digest)
    roots = {r["size"]: strict_b64(r["root"]) for r in tree["roots"]}
    for size, root in roots.items():
        if mth(leaves[:size]) != root:
            fail.append(f"merkle: root of {size}")
    for case in tree["inclusion"]:
        proof = [strict_b64(p) for p in case["proof"]]
        if not inclusion_ok(
            leaves[case["index"]], case["index"], case["size"], proof, roots[case["size"]]
        ):
            fail.append(f"merkle: inclusion {case['index']} in {case['size']}")
    for case in tree["consistency"]:
        proof = [strict_b64(p) for p in case["proof"]]
        m, n = case["old"], case["new"]
        if not consistency_ok(m, n, roots[m], roots[n], proof):
            fail.append(f"merkle: consistency {m} to {n}")

    notes = load("notes.json")
    for case in notes["notes"]:
        note = open_note(case["note"], [raw["signer"]], {notes["witness_name"]: raw["witness"]})
        if note is None or note.signed_by != raw["signer"] or note.text != case["text"]:
            fail.append(f"notes: size {case['size']} not signed by the log")
        elif note.cosigned.get(notes["witness_name"]) != notes["cosignature_time"]:
            fail.append(f"notes: size {case['size']} not cosigned")
        elif note.size != case["size"] or b64(note.root) != tree["roots"][case["size"]]["root"]:
            fail.append(f"notes: size {case['size']} holds another head")

    decisions = load("decisions.json")
    for case in decisions["decisions"]:
        s = case["statement"]
        if hashlib.sha256(case["request_input"].encode("utf-8")).hexdigest() != s["input_hash"]:
            fail.append(f"decisions: {s['decision']}: input hash")
        fields = [
            s["saga_id"],
            str(s["seq"]),
            s["input_hash"],
            s["decision"],
            s["reason"],
            s["result"],
            s["signed_at"],
            s["key_id"],
            s["principal"],
        ]
        message = b"sagacity-decision-v1\n" + b"".join(netstring(f) for f in fields)
        if message.hex() != case["message_hex"]:
            fail.append(f"decisions: {s['decision']}: message")
        if not _verifies(raw["approver"], strict_b64(case["signature"]), message):
            fail.append(f"decisions: {s['decision']}: signature")
        payload = json.loads(case["row_payload"])
        if (payload["by"], payload["decision"], payload["signature"]) != (
            s["principal"],
            s["decision"],
            case["signature"],
        ):
            fail.append(f"decisions: {s['decision']}: row payload")
    return fail


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")
