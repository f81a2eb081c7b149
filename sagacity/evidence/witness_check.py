"""The published tree heads checked against the witnesses: the quorum, rollbacks and forks.

:func:`witness_findings` is what ``sagacity log verify`` (and a live ``sagacity verify``) adds
when a trust file names witnesses:

* the latest published head must carry valid cosignatures of at least ``witness_quorum`` of the
  trust file's witnesses, else it fails naming the head;
* each witness with a ``url`` is asked for the latest head it cosigned (``GET /checkpoint``).
  Larger than the latest published head: the checkpoint store was rolled back, and the report
  names the leaves the rollback hides (saga and seq, from the leaf table) and whether the leaf
  table still hashes to the witnessed root. Same size, another root, or a smaller head the
  published one does not extend: a fork. A witness that cannot be reached is a warning.

A sequencer pass has its head cosigned before it publishes it, so a live log's witness can hold
a head the store gets only when the pass ends: a witness ahead of the store is compared with the
store's latest head read again once no pass is under way (under the sequencer lock).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
from contextlib import aclosing
from dataclasses import replace
from datetime import UTC, datetime

from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.logverify import LogFinding
from sagacity.evidence.merkle import (
    EMPTY_ROOT,
    Frontier,
    consistency_ranges,
    leaf_data,
    leaf_hash,
    range_hash,
    subtrees,
    verify_consistency,
)
from sagacity.evidence.note import COSIGNATURE_V1, NoteKey, OpenedNote, TreeHead, open_note
from sagacity.evidence.tlog import ORIGIN_PREFIX, HeadLog, Published
from sagacity.evidence.trust import TrustRoots
from sagacity.evidence.witness_client import TIMEOUT, WitnessEndpoint, latest_cosigned
from sagacity.journal import format_timestamp
from sagacity.store.tlog import TlogStore

__all__ = ["witness_findings"]

#: hidden leaves named one by one before the rest are counted
MAX_NAMED = 100


def _root(digest: bytes) -> str:
    return base64.b64encode(digest).decode("ascii")[:12] + "…"


def _when(opened: OpenedNote, name: str) -> str:
    stamp = opened.witnessed.get(name)
    if stamp is None:
        return ""
    return " at " + format_timestamp(datetime.fromtimestamp(stamp, UTC))


async def witness_findings(
    trust: TrustRoots, heads: HeadLog, store: TlogStore, *, timeout: float = TIMEOUT
) -> list[LogFinding]:
    """The witness checks of the log published in ``heads``; none when the trust file names no
    witness and requires no cosignature."""
    if not trust.witnesses and trust.witness_quorum == 0:
        return []
    keys = [NoteKey(w.name, w.key, COSIGNATURE_V1) for w in trust.witnesses]
    latest = heads.latest()
    origin = latest.head.origin if latest else ORIGIN_PREFIX + await store.database()
    endpoints = WitnessEndpoint.of(trust.witnesses)
    answers = await asyncio.gather(*(_ask(w, origin, heads, timeout) for w in endpoints))
    size = 0 if latest is None else latest.head.size
    if any(isinstance(a, OpenedNote) and a.head.size > size for a in answers):
        latest = await _settled(heads, store)
    found = _quorum(latest, heads, keys, trust.witness_quorum)
    for witness, answer in zip(endpoints, answers, strict=True):
        found += await _compare(witness, answer, latest, heads, store)
    return found


async def _settled(heads: HeadLog, store: TlogStore) -> Published | None:
    """The latest published head once the sequencer pass under way, if any, has ended: it
    publishes its head after the witnesses cosigned it, so only a head a witness holds that
    is still missing then was lost from the store."""
    async with store.sequencer():
        return heads.latest()


def _quorum(
    latest: Published | None, heads: HeadLog, keys: list[NoteKey], quorum: int
) -> list[LogFinding]:
    if quorum == 0:
        return []
    if latest is None:
        return [LogFinding(False, f"no tree head published yet in {heads.path}")]
    head = latest.head
    where = f"tree head {head.size} (published {format_timestamp(latest.at)})"
    try:
        opened = open_note(latest.note, NoteKey(head.origin, heads.key), keys, quorum=0)
    except ValueError as exc:
        return [LogFinding(True, f"{where}: {exc}")]
    if len(opened.witnessed) >= quorum:
        return []
    missing = sorted(k.name for k in keys if k.name not in opened.witnessed)
    return [
        LogFinding(
            True,
            f"{where} has {len(opened.witnessed)} of the {quorum} witness cosignatures the trust "
            f"file requires (missing: {', '.join(missing)}): not witnessed",
        )
    ]


async def _ask(
    witness: WitnessEndpoint, origin: str, heads: HeadLog, timeout: float
) -> OpenedNote | LogFinding | None:
    """The head ``witness`` cosigned last, verified (None: it holds none), or the warning why
    it cannot be compared."""
    try:
        note = await latest_cosigned(witness, origin, timeout=timeout)
    except EvidenceUnavailable as exc:
        return LogFinding(False, f"cannot check the published heads against it: {exc}")
    if note is None:
        return None
    try:
        return open_note(note, NoteKey(origin, heads.key), [witness.key])
    except ValueError as exc:
        return LogFinding(
            False, f"witness {witness.name} answered a head that does not verify: {exc}"
        )


async def _compare(
    witness: WitnessEndpoint,
    answer: OpenedNote | LogFinding | None,
    latest: Published | None,
    heads: HeadLog,
    store: TlogStore,
) -> list[LogFinding]:
    name = witness.name
    if isinstance(answer, LogFinding):
        return [answer]
    if answer is None:
        if latest is None or name not in _cosigners(latest, heads, witness):
            return []
        return [
            LogFinding(
                False,
                f"witness {name} holds no head of this log, though tree head "
                f"{latest.head.size} carries its cosignature: its state was lost (it must get a "
                "new key and name, or it could cosign a rollback)",
            )
        ]
    seen = answer.head
    size = 0 if latest is None else latest.head.size
    root = EMPTY_ROOT if latest is None else latest.head.root
    what = f"witness {name} cosigned tree head {seen.size}{_when(answer, name)}"
    if seen.size > size:
        agreed = _last_cosigned(heads, witness, seen.size)
        return await _rolled_back(what, seen, size, agreed, store)
    if seen.size == size:
        if seen.root == root:
            return []
        return [
            LogFinding(
                True,
                f"{what} with root {_root(seen.root)}, the published tree head {size} has root "
                f"{_root(root)}: a fork (two heads of one size signed by the log's key)",
            )
        ]
    if seen.size == 0 or await _extends(store, heads, seen.size, seen.root, size, root):
        return []
    return [
        LogFinding(
            True,
            f"{what} (root {_root(seen.root)}), which the published tree head {size} does not "
            "extend: a fork, or the log was rewritten after it was witnessed",
        )
    ]


async def _extends(
    store: TlogStore, heads: HeadLog, old: int, old_root: bytes, new: int, new_root: bytes
) -> bool:
    """Whether head ``new`` extends head ``old``: by the published head of that size when there
    is one (the history's own proofs link it to the latest), else by the stored tree's proof."""
    for item in heads.history():
        if not isinstance(item, str) and item.head.size == old:
            return item.head.root == old_root
    ranges = consistency_ranges(old, new)
    nodes = await store.nodes({n for a, b in ranges for n in subtrees(a, b)})
    try:
        proof = [range_hash(a, b, nodes) for a, b in ranges]
    except KeyError:
        return False
    return verify_consistency(old, new, old_root, new_root, proof)


def _cosigners(published: Published, heads: HeadLog, witness: WitnessEndpoint) -> set[str]:
    with contextlib.suppress(ValueError):
        key = NoteKey(published.head.origin, heads.key)
        return set(open_note(published.note, key, [witness.key], quorum=0).witnessed)
    return set()


def _last_cosigned(heads: HeadLog, witness: WitnessEndpoint, below: int) -> int:
    """The size of the largest published head of at most ``below`` leaves that ``witness``
    cosigned (0: none): the witness's later heads extend it, so leaves up to it agree."""
    best = 0
    for item in heads.history():
        if isinstance(item, str) or not best <= item.head.size <= below:
            continue
        if witness.name in _cosigners(item, heads, witness):
            best = item.head.size
    return best


async def _rolled_back(
    what: str,
    seen: TreeHead,
    published: int,
    agreed: int,
    store: TlogStore,
) -> list[LogFinding]:
    """The rollback, and what it hides: the leaves after the published head up to the
    witnessed one when the leaf table still hashes to the witnessed root; else the leaves after
    ``agreed`` (the last head the witness cosigned that is published), which are not the ones
    the witness saw."""
    named: list[LogFinding] = []
    leaves_of: list[tuple[int, str, int]] = []
    more = 0
    frontier = Frontier()
    async with aclosing(store.leaves()) as leaves:
        async for leaf in leaves:
            if leaf.index != frontier.size or frontier.size == seen.size:
                break
            frontier.append(leaf_hash(leaf_data(leaf.saga_id, leaf.seq, leaf.row_hash)))
            if leaf.index < min(published, agreed):
                continue
            if len(leaves_of) < MAX_NAMED:
                leaves_of.append((leaf.index, leaf.saga_id, leaf.seq))
            else:
                more += 1
    rollback = LogFinding(
        True,
        f"{what}, but the latest published head is {published}: the checkpoint store was "
        f"rolled back, hiding tree heads up to {seen.size} (leaves {published}..{seen.size - 1})",
    )
    if frontier.size == seen.size and frontier.root() == seen.root:
        rollback = replace(rollback, detail=rollback.detail + "; the leaf table still holds them")
        named = [
            LogFinding(
                True,
                f"leaf {index}: in tree head {seen.size}, hidden by the rollback of the "
                f"checkpoint store to tree head {published}",
                saga_id,
                seq,
            )
            for index, saga_id, seq in leaves_of
            if index >= published
        ]
        return [rollback, *named, *_more(more)]
    named = [
        LogFinding(
            True,
            f"leaf {index}: not the leaf the witness saw in tree head {seen.size} (or another "
            f"leaf up to it changed), as the leaf table holds it now",
            saga_id,
            seq,
        )
        for index, saga_id, seq in leaves_of
        if index >= agreed
    ]
    after = f"tree head {agreed} (the last one the witness cosigned that is published)"
    if frontier.size < seen.size:
        detail = (
            f"the leaf table holds {frontier.size} leaves in a row, fewer than the {seen.size} "
            f"of the tree head a witness cosigned: leaves {frontier.size}..{seen.size - 1} were "
            f"removed, and those after {after} may have been changed"
        )
    else:
        detail = (
            f"the leaf table does not hash to the root of tree head {seen.size} a witness "
            f"cosigned: leaves after {after} were changed after it was witnessed"
        )
    changed = LogFinding(True, detail)
    return [rollback, changed, *named, *_more(more)]


def _more(count: int) -> list[LogFinding]:
    if not count:
        return []
    return [LogFinding(True, f"and {count} more leaves, not named one by one")]
