"""The transparency log across all sagas: sequencer, published tree heads, proofs.

One Merkle tree (:mod:`sagacity.evidence.merkle`) over every journal row, in the order the
sequencer appended them; signed tree heads (:mod:`sagacity.evidence.note`) go to
``<checkpoint dir>/tlog/``, outside the database:

* ``checkpoint``: the latest signed note, replaced atomically (what a witness or client fetches);
* ``checkpoints.jsonl``: every note ever published, in order, one JSON line each (``at``: when,
  ``note``, ``consistency``: the proof that it extends the line before), appended, never rewritten.

The sequencer runs off the tool-call path (``sagacity log integrate``, or :func:`run_sequencer`
beside a worker): under a Postgres advisory lock it appends the rows the log lacks, checks the
stored tree still agrees with its last published head, and signs the new one. Checking the
whole log is :mod:`sagacity.evidence.logverify`'s.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import BinaryIO, NamedTuple

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from sagacity.errors import EvidenceUnavailable, LogInconsistent, SagacityError
from sagacity.evidence.attest import UNATTESTED, Attestor, Turns
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.heads import LogSnapshot, RowProof, inclusion_paths
from sagacity.evidence.keys import key_id, load_private_key
from sagacity.evidence.merkle import (
    EMPTY_ROOT,
    Frontier,
    Node,
    consistency_ranges,
    leaf_data,
    leaf_hash,
    range_hash,
    subtrees,
    verify_consistency,
    verify_inclusion,
)
from sagacity.evidence.note import Cosigner, NoteKey, NoteSigner, TreeHead, open_note, sign_note
from sagacity.evidence.proofs import write_proof_bundle
from sagacity.evidence.trust import TrustedWitness
from sagacity.evidence.witness_client import (
    WitnessEndpoint,
    Witnesses,
    Witnessing,
    log_witnessing,
)
from sagacity.journal import format_timestamp, parse_json, to_json
from sagacity.store.db import open_pool
from sagacity.store.journal import JournalStore
from sagacity.store.tlog import PendingRow, TlogStore

__all__ = [
    "HeadLog",
    "Integration",
    "Published",
    "Sequencer",
    "prove_saga",
    "run_sequencer",
]

_log = logging.getLogger(__name__)

SUBDIR = "tlog"
LATEST = "checkpoint"
HISTORY = "checkpoints.jsonl"
#: origin of a log whose first head names none: this, then the database's name
ORIGIN_PREFIX = "sagacity.local/journal/"
# rows whose proofs are read together when proving a saga
_PROOF_BATCH = 1000
#: how long a journal row may wait for the log (for its checkpoint, or the next pass)
GRACE = timedelta(minutes=10)


def _b64(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")


def _timestamp(text: str) -> datetime:
    return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class Published:
    """One published tree head: its note (signature verified), when, and its proof from the last."""

    head: TreeHead
    note: str
    at: datetime
    consistency: list[bytes]
    #: line number in ``checkpoints.jsonl`` (None: read from the end)
    line: int | None


class HeadLog:
    """The published tree heads under ``<checkpoint dir>/tlog/``, trusting ``key``'s signatures."""

    def __init__(self, checkpoint_dir: Path, key: Ed25519PublicKey) -> None:
        self.path = checkpoint_dir / SUBDIR
        self.key = key

    def parse(self, text: str, number: int | None) -> Published:
        """History line ``number``; ``ValueError`` when damaged, or not signed by the key."""
        try:
            raw = parse_json(text)
            note, at, proof = raw["note"], raw["at"], raw["consistency"]
            if not (isinstance(note, str) and isinstance(at, str) and isinstance(proof, list)):
                raise TypeError
            hashes = [base64.b64decode(p, validate=True) for p in proof]
            when = _timestamp(at)
        except (ValueError, KeyError, TypeError):
            raise ValueError("damaged line") from None
        opened = open_note(note, NoteKey(note.split("\n", 1)[0], self.key))
        return Published(opened.head, note, when, hashes, number)

    def history(self) -> Iterator[Published | str]:
        """Every published head in order; a line that is damaged or forged comes as a string
        saying which and why."""
        try:
            lines = (self.path / HISTORY).open(encoding="utf-8")
        except FileNotFoundError:
            return
        except OSError as exc:
            yield f"{HISTORY}: unreadable: {exc}"
            return
        with lines:
            for number, text in enumerate(lines, start=1):
                try:
                    yield self.parse(text, number)
                except ValueError as exc:
                    yield f"{HISTORY} line {number}: {exc}"

    def latest(self) -> Published | None:
        """The last head in the history that verifies (None: none published yet), read from
        the file's end: a crash can leave a partial last line, which is skipped."""
        try:
            with (self.path / HISTORY).open("rb") as history:
                for text in _lines_from_end(history):
                    try:
                        return self.parse(text.decode("utf-8"), None)
                    except (ValueError, UnicodeDecodeError):
                        continue
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise EvidenceUnavailable(f"cannot read {self.path / HISTORY}: {exc}") from None
        return None

    def current(self) -> str | None:
        """The ``checkpoint`` file's note as it is now (witnesses may have added their
        cosignatures since it was published); None when there is none. Not verified."""
        try:
            return (self.path / LATEST).read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise EvidenceUnavailable(f"cannot read {self.path / LATEST}: {exc}") from None

    def publish(self, note: str, consistency: Sequence[bytes], at: datetime) -> None:
        """Append ``note`` to the history (one ``O_APPEND`` write), then make it ``checkpoint``."""
        line = to_json(
            {
                "at": format_timestamp(at),
                "consistency": [_b64(p) for p in consistency],
                "note": note,
            }
        )
        try:
            self.path.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path / HISTORY, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, (line + "\n").encode("utf-8"))
                os.fsync(fd)
            finally:
                os.close(fd)
            with tempfile.NamedTemporaryFile(
                "w", encoding="utf-8", dir=self.path, prefix=".checkpoint-", delete=False
            ) as tmp:
                tmp.write(note)
                tmp.flush()
                os.fsync(tmp.fileno())
            os.replace(tmp.name, self.path / LATEST)
        except OSError as exc:
            raise EvidenceUnavailable(f"cannot publish a tree head in {self.path}: {exc}") from None


def _lines_from_end(file: BinaryIO, chunk: int = 1 << 16) -> Iterator[bytes]:
    """The file's non-empty lines, last first, reading ``chunk`` bytes at a time."""
    end = file.seek(0, os.SEEK_END)
    rest = b""
    while end > 0:
        start = max(0, end - chunk)
        file.seek(start)
        lines = (file.read(end - start) + rest).split(b"\n")
        end = start
        rest = lines.pop(0)  # may continue in the chunk before
        yield from (line for line in reversed(lines) if line)
    if rest:
        yield rest


@dataclass(frozen=True, slots=True)
class Integration:
    """What one sequencer pass did: rows appended, the head it published (None: none), and
    what the witnesses said (None: none asked).

    Rows no trusted checkpoint covers are not appended: ``waiting`` of them are within the
    grace period (a call between its INTENT and its outcome), left for a later pass;
    ``unattested`` past it, the first :data:`NAMED` of them named in ``named``.
    """

    appended: int
    size: int
    published: TreeHead | None
    witnessing: Witnessing | None = None
    waiting: int = 0
    unattested: int = 0
    named: tuple[PendingRow, ...] = ()


#: unattested rows a pass names (it counts the rest)
NAMED = 100


class Skipped(NamedTuple):
    """The rows a pass left out: :class:`Integration`'s last three fields."""

    waiting: int
    unattested: int
    named: tuple[PendingRow, ...]


class Sequencer:
    """Appends attested journal rows to the log and publishes signed tree heads, one pass at a
    time.

    A row is appended only when a checkpoint of its saga signed by one of ``signers`` (by key
    id; default: the log's own key) attests it (:mod:`sagacity.evidence.attest`), the checkpoints being read
    from ``checkpoint_dir``, where the workers write them.
    """

    def __init__(
        self,
        store: TlogStore,
        checkpoint_dir: Path,
        key: Ed25519PrivateKey,
        *,
        origin: str | None = None,
        cosigners: Sequence[Cosigner] = (),
        witnesses: Sequence[TrustedWitness] = (),
        batch: int = 5000,
        signers: Mapping[str, Ed25519PublicKey] | None = None,
        grace: timedelta = GRACE,
    ) -> None:
        self.store = store
        self.heads = HeadLog(checkpoint_dir, key.public_key())
        # its own checkpoints attest rows, and those of the keys it is told to trust besides
        own = key.public_key()
        checkpoints = CheckpointDir(checkpoint_dir, {key_id(own): own, **(signers or {})})
        self.attestor = Attestor(JournalStore(store.pool), checkpoints)
        self.grace = grace
        self._key = key
        self._origin = origin
        self._cosigners = list(cosigners)
        self._witnesses = Witnesses(WitnessEndpoint.of(witnesses))
        self._batch = batch

    async def integrate(self, *, full_check: bool = False) -> Integration:
        """Append the attested rows the log lacks and publish the new head, under the sequencer
        lock.

        First the stored tree must agree with the last published head (its root at that size,
        and a consistency proof to the new size): :class:`LogInconsistent` otherwise, and
        nothing is signed. ``full_check`` also recomputes every stored leaf from the leaf table.
        Rows no trusted checkpoint signed before the pass began covers are skipped (other
        sagas' rows go on), and counted in the result.

        Each witness (trust file entries with a ``url``) is asked to cosign the new head and the
        note is published with the cosignatures given; one that is down or refuses does not stop
        the log (:attr:`Integration.witnessing` says which). With nothing new, the latest head is
        offered to the witnesses that have not cosigned it, and published again when one does.
        """
        async with self.store.sequencer():
            last = self.heads.latest()
            origin = await self._origin_for(last)
            frontier = await self._frontier(last, full_check)
            started = datetime.now(UTC)
            self.attestor.begin(signed_before=started)
            appended = waiting = unattested = 0
            named: list[PendingRow] = []
            chunk: list[PendingRow] = []
            async with (
                aclosing(self.store.pending(batch=self._batch)) as rows,
                aclosing(_batches(rows, self._batch)) as batches,
            ):
                async for batch in batches:
                    await self.attestor.prepare((row.saga_id, row.seq) for row in batch)
                    turns = Turns()  # rows read ahead are walked without a wait
                    for row in batch:
                        await turns.take()
                        if await self.attestor.covers(row.saga_id, row.seq, row.hash):
                            chunk.append(row)
                            if len(chunk) == self._batch:
                                appended += await self._append(frontier, chunk)
                                chunk = []
                        elif abs(row.timestamp - started) <= self.grace:
                            waiting += 1
                        else:
                            unattested += 1
                            if len(named) < NAMED:
                                named.append(row)
            appended += await self._append(frontier, chunk)
            skipped = Skipped(waiting, unattested, tuple(named))
            old = 0 if last is None else last.head.size
            if last is not None and frontier.size == old:
                witnessing = await self._rewitness(last)
                again = last.head if witnessing is not None and witnessing.lines else None
                return Integration(appended, frontier.size, again, witnessing, *skipped)
            head = TreeHead(origin, frontier.size, frontier.root())
            proof: list[bytes] = []
            if last is not None and old > 0:
                proof = await self._proof(consistency_ranges(old, head.size))
                if not verify_consistency(old, head.size, last.head.root, head.root, proof):
                    raise LogInconsistent(
                        f"the stored tree at {head.size} leaves does not extend tree head "
                        f"{old}: refusing to sign it"
                    )
            note = sign_note(head, [NoteSigner(origin, self._key), *self._cosigners])
            witnessing = await self._witness(head, note, last)
            lines = [] if witnessing is None else witnessing.lines
            self.heads.publish(note + "".join(lines), proof, datetime.now(UTC))
            return Integration(appended, head.size, head, witnessing, *skipped)

    def _cosigners_of(self, last: Published) -> set[str]:
        """The configured witnesses whose valid cosignatures the published note carries."""
        key = NoteKey(last.head.origin, self.heads.key)
        try:
            return set(open_note(last.note, key, self._witnesses.keys, quorum=0).witnessed)
        except ValueError:  # a cosignature line that does not verify counts for none
            return set()

    def _learn(self, last: Published | None) -> None:
        # the witnesses that cosigned the latest head hold at least it
        if last is not None:
            self._witnesses.learn(self._cosigners_of(last), last.head.size)

    async def _witness(
        self, head: TreeHead, note: str, last: Published | None
    ) -> Witnessing | None:
        if not self._witnesses:
            return None
        self._learn(last)
        published = 0 if last is None else last.head.size
        return await self._witnesses.cosign(head, note, self._consistency, published=published)

    async def _rewitness(self, last: Published) -> Witnessing | None:
        """Offer the latest head to the witnesses that have not cosigned it; publish it again
        (same size, empty proof) with the cosignatures it gets."""
        if not self._witnesses:
            return None
        self._learn(last)
        missing = {w.name for w in self._witnesses.endpoints} - self._cosigners_of(last)
        if not missing:
            return None
        witnessing = await self._witnesses.cosign(
            last.head, last.note, self._consistency, published=last.head.size, only=missing
        )
        if witnessing.lines:
            self.heads.publish(last.note + "".join(witnessing.lines), [], datetime.now(UTC))
        return witnessing

    async def _consistency(self, old: int, new: int) -> list[bytes]:
        return await self._proof(consistency_ranges(old, new))

    async def _origin_for(self, last: Published | None) -> str:
        if last is not None:
            if self._origin is not None and self._origin != last.head.origin:
                raise EvidenceUnavailable(
                    f"the log in {self.heads.path} is {last.head.origin!r}, not {self._origin!r}"
                )
            return last.head.origin
        return self._origin or ORIGIN_PREFIX + await self.store.database()

    async def _frontier(self, last: Published | None, full_check: bool) -> Frontier:
        size = await self.store.size()
        old = 0 if last is None else last.head.size
        if size < old:
            raise LogInconsistent(
                f"the log holds {size} leaves, but tree head {old} was published "
                f"{format_timestamp(last.at) if last else ''}: leaves were removed"
            )
        if full_check:
            return await self._recompute(last)
        stored = await self.store.nodes(Frontier.nodes(size))
        try:
            frontier = Frontier(size, [stored[node] for node in Frontier.nodes(size)])
        except KeyError as exc:
            raise LogInconsistent(
                f"the stored tree lacks subtree {exc}: refusing to sign"
            ) from None
        if last is not None:
            root = frontier.root() if size == old else await self._root(old)
            if root != last.head.root:
                raise LogInconsistent(
                    f"the stored tree disagrees with tree head {old} (published "
                    f"{format_timestamp(last.at)}): its leaves or subtree hashes were changed; "
                    "refusing to sign over them (run `sagacity log verify`)"
                )
        return frontier

    async def _recompute(self, last: Published | None) -> Frontier:
        frontier = Frontier()
        async with aclosing(self.store.leaves()) as leaves:
            async for leaf in leaves:
                if leaf.index != frontier.size:
                    raise LogInconsistent(
                        f"leaf {frontier.size} is missing from the leaf table: refusing to sign"
                    )
                digest = leaf_hash(leaf_data(leaf.saga_id, leaf.seq, leaf.row_hash))
                if leaf.leaf_hash != digest:
                    raise LogInconsistent(
                        f"leaf {leaf.index} (saga {leaf.saga_id!r} seq {leaf.seq}) does not "
                        "hash to the stored leaf hash: the leaf table was edited; refusing to sign"
                    )
                frontier.append(digest)
                if (
                    last is not None
                    and frontier.size == last.head.size
                    and frontier.root() != last.head.root
                ):
                    raise LogInconsistent(
                        f"the leaf table disagrees with tree head {last.head.size}: "
                        "refusing to sign over it (run `sagacity log verify`)"
                    )
        return frontier

    async def _root(self, size: int) -> bytes:
        if size == 0:
            return EMPTY_ROOT
        nodes = await self.store.nodes(subtrees(0, size))
        try:
            return range_hash(0, size, nodes)
        except KeyError as exc:
            raise LogInconsistent(f"the stored tree lacks subtree {exc}") from None

    async def _proof(self, ranges: list[tuple[int, int]]) -> list[bytes]:
        nodes = await self.store.nodes({n for a, b in ranges for n in subtrees(a, b)})
        try:
            return [range_hash(a, b, nodes) for a, b in ranges]
        except KeyError as exc:
            raise LogInconsistent(f"the stored tree lacks subtree {exc}") from None

    async def _append(self, frontier: Frontier, rows: list[PendingRow]) -> int:
        if not rows:
            return 0
        start = frontier.size
        made: list[tuple[Node, bytes]] = []
        turns = Turns()
        for row in rows:
            await turns.take()
            made += frontier.append(leaf_hash(leaf_data(row.saga_id, row.seq, row.hash)))
        await self.store.append(start, [(r.saga_id, r.seq, r.hash) for r in rows], made)
        return len(rows)


async def _batches(
    rows: AsyncIterator[PendingRow], size: int
) -> AsyncGenerator[list[PendingRow], None]:
    """``rows`` in lists of ``size`` (the last shorter)."""
    batch: list[PendingRow] = []
    async for row in rows:
        batch.append(row)
        if len(batch) == size:
            yield batch
            batch = []
    if batch:
        yield batch


async def run_sequencer(
    conninfo: str,
    checkpoint_dir: Path | None,
    signing_key: Path | None,
    *,
    every: float = 10.0,
    origin: str | None = None,
    cosigners: Sequence[Cosigner] = (),
    witnesses: Sequence[TrustedWitness] = (),
    signers: Mapping[str, Ed25519PublicKey] | None = None,
) -> None:
    """Integrate every ``every`` seconds until cancelled; returns at once when either setting
    is unset (the log is off). Witness refusals are logged as errors on every pass they recur;
    a witness going down or coming back is logged once; unattested rows when they change.
    ``signers``: the keys whose checkpoints attest rows, by key id (default: the signing key's
    public half).

    For a worker to run beside its tool calls, on a small pool of its own: the first pass
    recomputes the whole leaf table against the last head, later ones check the stored tree's
    root. A pass that fails (database down, a tampered log) is logged and tried again.
    """
    if checkpoint_dir is None or signing_key is None:
        return
    key = load_private_key(signing_key)
    pool = await open_pool(conninfo, min_size=0, max_size=3)
    try:
        sequencer = Sequencer(
            TlogStore(pool),
            checkpoint_dir,
            key,
            origin=origin,
            cosigners=cosigners,
            witnesses=witnesses,
            signers=signers,
        )
        full_check = True
        down: set[str] = set()  # witnesses that did not answer on the last pass that asked
        told: tuple[int, tuple[PendingRow, ...]] = (0, ())
        while True:
            try:
                done = await sequencer.integrate(full_check=full_check)
                full_check = False
                if done.published is not None:
                    _log.info(
                        "transparency log: %d rows appended, tree head %d", done.appended, done.size
                    )
                down = log_witnessing(_log, done.witnessing, down)
                if (done.unattested, done.named) != told:  # said again only when it changes
                    told = (done.unattested, done.named)
                    for row in done.named:
                        _log.error(
                            "transparency log: saga %r seq %d not logged: %s",
                            row.saga_id,
                            row.seq,
                            UNATTESTED,
                        )
                    if done.unattested > len(done.named):
                        _log.error(
                            "transparency log: %d more unattested rows not logged",
                            done.unattested - len(done.named),
                        )
            except LogInconsistent as exc:
                _log.error("transparency log: %s", exc)
            except SagacityError as exc:
                _log.warning("transparency log: pass failed, will retry: %s", exc)
            except Exception:
                # whatever a folder the workers write holds, the log must go on: one pass that
                # meets something unforeseen is logged whole, and the next pass tries again
                _log.exception("transparency log: pass failed unexpectedly, will retry")
            await asyncio.sleep(every)
    finally:
        await pool.close()


@dataclass(frozen=True, slots=True)
class Proved:
    """What :func:`prove_saga` wrote: rows proved against which head, and rows not yet in it."""

    head: TreeHead
    rows: int
    later: int


async def prove_saga(
    journal: JournalStore, store: TlogStore, heads: HeadLog, saga_id: str, out: Path
) -> Proved:
    """Write ``saga_id``'s proof bundle to ``out``: its rows in the latest published head, one
    inclusion proof each, and that head's note (with the witnesses' cosignatures it has now).
    Every proof is checked before it is written; a row the log holds otherwise raises
    :class:`LogInconsistent` naming its seq."""
    latest = LogSnapshot.latest(heads, store)
    if latest is None:
        raise EvidenceUnavailable(
            f"no tree head published in {heads.path}: run `sagacity log integrate` first"
        )
    head = latest.head
    rows = await journal.read(saga_id)
    if not rows:
        raise EvidenceUnavailable(f"the journal has no saga {saga_id!r}")
    logged = await store.saga_leaves(saga_id)
    covered = []
    for row in rows:
        index = logged.get(row.seq, (head.size, ""))[0]
        if index >= head.size:
            break
        covered.append((row, index))
    if not covered:
        raise EvidenceUnavailable(
            f"no row of saga {saga_id!r} is in tree head {head.size} yet: run "
            "`sagacity log integrate`, then prove it"
        )
    proofs = []
    for offset in range(0, len(covered), _PROOF_BATCH):
        batch = covered[offset : offset + _PROOF_BATCH]
        paths = await inclusion_paths(store, head.size, [index for _, index in batch])
        for (row, index), hashes in zip(batch, paths, strict=True):
            leaf = leaf_hash(leaf_data(row.saga_id, row.seq, row.hash))
            if not verify_inclusion(leaf, index, head.size, hashes, head.root):
                raise LogInconsistent(
                    f"saga {saga_id!r} seq {row.seq}: the journal's row is not the one tree "
                    f"head {head.size} holds at leaf {index} (run `sagacity log verify`)"
                )
            proofs.append(RowProof(row.seq, index, hashes))
    write_proof_bundle(
        out,
        saga_id,
        latest.note,
        [row for row, _ in covered],
        proofs,
        published_at=latest.published_at,
    )
    return Proved(head, len(covered), len(rows) - len(covered))
