"""A tree head carried as evidence: its inclusion proofs, its witnesses, and how fresh it is.

An export bundle and a proof bundle each carry one signed tree head of the transparency log
(:mod:`sagacity.evidence.tlog`). This module reads the head an export takes (:class:`LogSnapshot`,
the note as published with the cosignatures witnesses added), proves rows in it, and, for the
offline verifiers, opens the head against the keys the auditor trusts (:func:`open_head`), says
when it is fresh as of (:class:`Freshness`), and weighs a newer head the auditor holds
(:func:`compare_newer`). Pure at run time: standard library and ``cryptography``; the database
store and the head log are imported for type checking only.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable, LogInconsistent
from sagacity.evidence.merkle import inclusion_ranges, range_hash, subtrees, verify_consistency
from sagacity.evidence.note import COSIGNATURE_V1, NoteKey, TreeHead, open_note
from sagacity.journal import parse_json, to_json

if TYPE_CHECKING:
    from sagacity.evidence.tlog import HeadLog
    from sagacity.evidence.trust import TrustRoots
    from sagacity.store.tlog import TlogStore

__all__ = [
    "Comparison",
    "Freshness",
    "LogSnapshot",
    "NewerHead",
    "OpenedHead",
    "RowProof",
    "compare_newer",
    "inclusion_paths",
    "open_head",
    "read_newer",
    "stamp",
    "weigh",
    "witness_keys",
    "witnessed_freshness",
]


def stamp(at: datetime) -> str:
    """``at`` as the verifiers print it: UTC to the second, ``2026-12-06T01:02:03Z``."""
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True)
class RowProof:
    """Row ``seq`` is leaf ``index`` of the tree; ``hashes`` is its inclusion path."""

    seq: int
    index: int
    hashes: list[bytes]

    def fields(self) -> dict[str, object]:
        """``seq``, ``leaf_index`` and ``hashes`` (base64), as a proof line holds them."""
        encoded = [base64.b64encode(h).decode("ascii") for h in self.hashes]
        return {"seq": self.seq, "leaf_index": self.index, "hashes": encoded}

    def line(self) -> str:
        return to_json(self.fields())

    @classmethod
    def parse(
        cls, line: str, extra: frozenset[str] = frozenset()
    ) -> tuple[RowProof, dict[str, object]]:
        """The proof a line holds, and its ``extra`` fields; ``ValueError`` saying why not."""
        raw = parse_json(line)
        wanted = {"seq", "leaf_index", "hashes"} | extra
        if not isinstance(raw, dict) or set(raw) != wanted:
            raise ValueError(f"a proof needs exactly {', '.join(sorted(wanted))}")
        seq, index, hashes = raw["seq"], raw["leaf_index"], raw["hashes"]
        if not all(isinstance(n, int) and not isinstance(n, bool) for n in (seq, index)):
            raise ValueError("seq and leaf_index must be integers")
        if not isinstance(hashes, list) or not all(isinstance(h, str) for h in hashes):
            raise ValueError("hashes must be a list of base64 strings")
        try:
            decoded = [base64.b64decode(h, validate=True) for h in hashes]
        except (binascii.Error, ValueError):
            raise ValueError("a hash is not base64") from None
        return cls(seq, index, decoded), {name: raw[name] for name in extra}


async def inclusion_paths(store: TlogStore, size: int, indexes: Sequence[int]) -> list[list[bytes]]:
    """The RFC 9162 inclusion path of each leaf of ``indexes`` in the tree of ``size`` leaves,
    from the stored subtree hashes (one query); :class:`LogInconsistent` when one is missing."""
    ranges = [inclusion_ranges(index, size) for index in indexes]
    nodes = await store.nodes({n for rs in ranges for a, b in rs for n in subtrees(a, b)})
    try:
        return [[range_hash(a, b, nodes) for a, b in rs] for rs in ranges]
    except KeyError as exc:
        raise LogInconsistent(f"the stored tree lacks subtree {exc}") from None


@dataclass(frozen=True)
class LogSnapshot:
    """The log's newest published head, as a bundle carries it, and the store to prove rows from.

    ``note`` is the ``checkpoint`` file's note when it holds that head (with the cosignatures
    witnesses added since it was published), else the note as the history holds it.
    """

    note: str
    head: TreeHead
    published_at: datetime
    store: TlogStore

    @classmethod
    def latest(cls, heads: HeadLog, store: TlogStore) -> LogSnapshot | None:
        """The newest head ``heads`` publishes (None: none yet)."""
        latest = heads.latest()
        if latest is None:
            return None
        note = latest.note
        current = heads.current()
        if current is not None:
            try:
                opened = open_note(current, NoteKey(latest.head.origin, heads.key))
            except ValueError:
                opened = None  # damaged or forged: the history's copy is the one signed
            if opened is not None and opened.head == latest.head:
                note = current
        return cls(note, latest.head, latest.at, store)

    async def proof(self, saga_id: str, upto: int) -> RowProof | None:
        """The inclusion proof of the saga's last row at or before seq ``upto`` that this head
        holds, as the log holds it (None: no such row)."""
        logged = await self.store.saga_leaves(saga_id)
        inside = [s for s, (index, _) in logged.items() if s <= upto and index < self.head.size]
        if not inside:
            return None
        seq = max(inside)
        index = logged[seq][0]
        (hashes,) = await inclusion_paths(self.store, self.head.size, [index])
        return RowProof(seq, index, hashes)


def witness_keys(trust: TrustRoots | None) -> list[NoteKey]:
    """The cosignature keys of the witnesses ``trust`` pins."""
    if trust is None:
        return []
    return [NoteKey(w.name, w.key, COSIGNATURE_V1) for w in trust.witnesses]


@dataclass
class OpenedHead:
    """A carried head whose log signature verified, and which trusted witnesses cosigned it when."""

    head: TreeHead
    #: trusted witness name -> the time its cosignature states
    witnessed: dict[str, datetime] = field(default_factory=dict)
    #: trusted witnesses whose line is there but does not verify: a forged cosignature
    forged: list[str] = field(default_factory=list)
    #: how many trusted cosignatures the verifier requires
    quorum: int = 0

    @property
    def newest_witness(self) -> tuple[str, datetime] | None:
        """The witness whose cosignature is the newest, and its time."""
        if not self.witnessed:
            return None
        name = max(self.witnessed, key=lambda n: self.witnessed[n])
        return name, self.witnessed[name]

    @property
    def short_of_quorum(self) -> str | None:
        """What the head lacks in cosignatures, or None when the quorum is met."""
        if len(self.witnessed) >= self.quorum:
            return None
        return (
            f"tree head {self.head.size} has {len(self.witnessed)} of the {self.quorum} witness "
            "cosignatures required: whoever holds the log's key could have shown this bundle a "
            "fork of the log, or an old head as the newest"
        )


def _key_names(note: str) -> set[tuple[str, bytes]]:
    """The (key name, key id) of each signature line of ``note`` that parses."""
    found = set()
    for line in note[note.rfind("\n\n") + 2 :].splitlines():
        parts = line.split(" ")
        if len(parts) == 3:
            try:
                found.add((parts[1], base64.b64decode(parts[2], validate=True)[:4]))
            except (binascii.Error, ValueError):
                continue
    return found


def open_head(
    note: str, log_key: Ed25519PublicKey, witnesses: Sequence[NoteKey] = (), quorum: int = 0
) -> OpenedHead:
    """Open ``note`` with the trusted log key (``ValueError`` unless it signed it) and count the
    cosignatures of ``witnesses``; a line of a trusted witness that does not verify is
    :attr:`OpenedHead.forged`."""
    origin = note.split("\n", 1)[0]
    opened = open_note(note, NoteKey(origin, log_key))
    result = OpenedHead(opened.head, quorum=quorum)
    present = _key_names(note)
    for witness in witnesses:
        if (witness.name, witness.id) not in present:
            continue
        try:
            time = open_note(note, NoteKey(origin, log_key), [witness]).witnessed[witness.name]
        except ValueError:
            result.forged.append(witness.name)
            continue
        if time is not None:
            result.witnessed[witness.name] = datetime.fromtimestamp(time, UTC)
    return result


@dataclass(frozen=True, slots=True)
class Freshness:
    """The time a bundle is fresh as of, what states it, and whether a trusted key signed it."""

    at: datetime
    source: str
    signed: bool

    def line(self) -> str:
        return f"fresh as of {stamp(self.at)} ({self.source})"

    def older_than(self, limit: timedelta, now: datetime) -> str | None:
        """Why the bundle cannot count as current under ``--not-older-than limit``, or None."""
        if not self.signed:
            return (
                f"nothing signed by a key you trust dates it ({self.source} says "
                f"{stamp(self.at)}): it cannot be shown to be newer than {_span(limit)}"
            )
        if now - self.at > limit:
            return (
                f"{self.line()}, which is {_span(now - self.at)} old, more than the "
                f"{_span(limit)} allowed"
            )
        return None


def _span(delta: timedelta) -> str:
    """``delta`` in its two largest units ("2d3h", "5m10s"): an age a reader weighs at a glance,
    not one that changes with the second the check ran."""
    seconds = int(delta.total_seconds())
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    parts = [(days, "d"), (hours, "h"), (minutes, "m"), (seconds, "s")]
    first = next((i for i, (n, _) in enumerate(parts) if n), len(parts))
    return "".join(f"{n}{unit}" for n, unit in parts[first : first + 2] if n) or "0s"


def witnessed_freshness(opened: OpenedHead, whose: str = "") -> Freshness | None:
    """The freshness the newest trusted cosignature on ``opened`` gives, or None."""
    newest = opened.newest_witness
    if newest is None:
        return None
    return Freshness(newest[1], f"{whose}witness {newest[0]}'s cosignature", True)


@dataclass
class NewerHead:
    """A tree head the auditor got out of band (``--checkpoint FILE``), opened with the log key.

    From a history file (the log's ``checkpoints.jsonl``) it also holds every head before it,
    with the consistency proof each carries from the one before.
    """

    opened: OpenedHead
    #: (head, consistency proof from the head before it), oldest first; empty for one note
    history: list[tuple[TreeHead, list[bytes]]] = field(default_factory=list)

    @property
    def head(self) -> TreeHead:
        return self.opened.head


def read_newer(
    text: str, log_key: Ed25519PublicKey, witnesses: Sequence[NoteKey] = ()
) -> NewerHead:
    """The head of a signed note, or the last head of a ``checkpoints.jsonl`` history (each
    line ``{"at", "note", "consistency"}``); :class:`EvidenceUnavailable` saying why not."""
    if not text.lstrip().startswith("{"):
        try:
            return NewerHead(open_head(text, log_key, witnesses))
        except ValueError as exc:
            raise EvidenceUnavailable(f"not a tree head signed by the log's key: {exc}") from None
    history: list[tuple[TreeHead, list[bytes]]] = []
    note = ""
    for number, line in enumerate(text.splitlines(), start=1):
        try:
            raw = parse_json(line)
            note = raw["note"]
            proof = [base64.b64decode(p, validate=True) for p in raw["consistency"]]
            head = open_head(note, log_key).head
        except (ValueError, KeyError, TypeError) as exc:
            raise EvidenceUnavailable(f"history line {number}: {exc}") from None
        history.append((head, proof))
    if not history:
        raise EvidenceUnavailable("the history holds no tree head")
    return NewerHead(open_head(note, log_key, witnesses), history)


@dataclass
class Comparison:
    """What a newer head says of a bundle's: why it is not current, what is forged, what is not known."""

    stale: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: the freshness the newer head lends the bundle's, when it shows the log has not grown
    fresher: Freshness | None = None


def compare_newer(head: TreeHead, fresh: Freshness | None, newer: NewerHead) -> Comparison:
    """Weigh the bundle's ``head`` (fresh as of ``fresh``; None: nothing dates it) against
    ``newer``."""
    found = Comparison()
    other = newer.head
    if other.origin != head.origin:
        found.problems.append(
            f"the checkpoint you gave is of log {other.origin!r}, the bundle's tree head of "
            f"{head.origin!r}: the bundle's head is not of the log you checked"
        )
        return found
    if other.size < head.size:
        found.notes.append(
            f"the checkpoint you gave (tree head {other.size}) is older than the bundle's "
            f"(tree head {head.size}): it shows nothing newer"
        )
        return found
    if other.size == head.size:
        if other.root != head.root:
            found.problems.append(
                f"the checkpoint you gave has {other.size} leaves like the bundle's tree head, "
                "but another root: the log was forked, or the bundle's head was forged"
            )
            return found
        found.notes.append(
            f"the checkpoint you gave shows the log has not grown since tree head {head.size}"
        )
        later = witnessed_freshness(newer.opened, "the checkpoint you gave: ")
        if later is not None and (fresh is None or later.at > fresh.at):
            found.fresher = later
        return found
    found.stale.append(
        f"the log has grown to size {other.size} since the bundle's tree head {head.size} "
        f"({'not dated' if fresh is None else fresh.line()}); rows after the bundle's head are "
        "not covered"
    )
    consistent = _consistent(head, newer)
    if consistent is None:
        found.notes.append(
            f"cannot check that tree head {head.size} is consistent with tree head "
            f"{other.size}: no consistency proof between them was given (give the log's "
            "checkpoints.jsonl as --checkpoint, which holds one from each head to the next)"
        )
    elif consistent:
        found.notes.append(
            f"tree head {other.size} is consistent with the bundle's tree head {head.size} "
            "(the log's consistency proofs from one head to the next verify)"
        )
    else:
        found.problems.append(
            f"tree head {other.size} is not consistent with the bundle's tree head "
            f"{head.size}: the log was forked or rewritten"
        )
    return found


def _consistent(head: TreeHead, newer: NewerHead) -> bool | None:
    """Whether the history's chain of consistency proofs leads from ``head`` to its last head;
    None when the history does not hold ``head``'s size."""
    chain = newer.history
    start = next((n for n, (h, _) in enumerate(chain) if h.size == head.size), None)
    if start is None:
        return None
    if chain[start][0].root != head.root:
        return False
    previous = head
    for current, proof in chain[start + 1 :]:
        if current.size < previous.size:
            return False
        fresh_tree = previous.size == 0
        if not fresh_tree and not verify_consistency(
            previous.size, current.size, previous.root, current.root, proof
        ):
            return False
        previous = current
    return previous == newer.head


def weigh(
    head: TreeHead | None,
    fresh: Freshness | None,
    *,
    not_older_than: timedelta | None,
    newer: NewerHead | None,
    now: datetime,
) -> Comparison:
    """Whether a bundle with ``head`` (None: it carries none), fresh as of ``fresh``, counts as
    current under ``--not-older-than`` and against a ``--checkpoint`` head."""
    found = Comparison()
    if newer is not None:
        if head is None:
            found.stale.append(
                f"the bundle carries no tree head, so nothing shows it covers tree head "
                f"{newer.head.size} of the log"
            )
        else:
            found = compare_newer(head, fresh, newer)
    fresh = found.fresher or fresh
    if not_older_than is not None:
        if fresh is None:
            found.stale.append("nothing dates the bundle: no witness cosignature, no time stated")
        else:
            old = fresh.older_than(not_older_than, now)
            if old is not None:
                found.stale.append(old)
    return found
