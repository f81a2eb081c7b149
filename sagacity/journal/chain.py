"""The hash chain: the exact bytes SHA-256 covers, and sealing a draft into an entry.

``docs/hash-rules.md`` describes this module for someone writing an independent verifier.
"""

from __future__ import annotations

import hashlib
from datetime import datetime

from sagacity.journal.entry import Draft, Entry, utc_micros
from sagacity.journal.phases import Phase

#: The "previous hash" of row 1 in every saga.
GENESIS_HASH = "0" * 64
#: Domain tag at the head of every hashed message; changes only with the rules.
DOMAIN = b"sagacity-journal-v1\n"


def format_timestamp(ts: datetime) -> str:
    """UTC, always six fractional digits, ``Z`` suffix: ``2026-01-02T03:04:05.000006Z``."""
    t = utc_micros(ts)
    # fields formatted one by one: strftime is slower, and its %Y does not pad years below 1000
    # on every platform (the rule is always four digits); every row is hashed through here
    return (
        f"{t.year:04d}-{t.month:02d}-{t.day:02d}T"
        f"{t.hour:02d}:{t.minute:02d}:{t.second:02d}.{t.microsecond:06d}Z"
    )


def _netstring(value: str) -> bytes:
    raw = value.encode("utf-8")
    return str(len(raw)).encode("ascii") + b":" + raw + b","


def canonical_bytes(
    prev_hash: str,
    saga_id: str,
    seq: int,
    tool_name: str,
    phase: Phase | str,
    input: str,
    payload: str,
    timestamp: datetime,
) -> bytes:
    """The message a row's hash covers: the domain tag, then eight netstrings in schema order."""
    fields = (
        prev_hash,
        saga_id,
        str(seq),
        tool_name,
        str(phase),
        input,
        payload,
        format_timestamp(timestamp),
    )
    return DOMAIN + b"".join(_netstring(f) for f in fields)


def entry_hash(prev_hash: str, entry: Entry) -> str:
    """Recompute the hash ``entry`` should carry when it follows a row hashed ``prev_hash``."""
    e = entry
    return _digest(
        prev_hash, e.saga_id, e.seq, e.tool_name, e.phase, e.input, e.payload, e.timestamp
    )


def _digest(
    prev_hash: str,
    saga_id: str,
    seq: int,
    tool_name: str,
    phase: Phase,
    input_: str,
    payload: str,
    timestamp: datetime,
) -> str:
    """The chained hash of a row's fields (docs/hash-rules.md)."""
    message = canonical_bytes(prev_hash, saga_id, seq, tool_name, phase, input_, payload, timestamp)
    return hashlib.sha256(message).hexdigest()


def seal(draft: Draft, *, seq: int, prev_hash: str, timestamp: datetime) -> Entry:
    """Give ``draft`` its place: seq, a microsecond UTC timestamp and the chained hash."""
    phase, at = Phase(draft.phase), utc_micros(timestamp)
    # hashed from the fields, so the entry is built once (every row a worker writes is sealed)
    digest = _digest(
        prev_hash, draft.saga_id, seq, draft.tool_name, phase, draft.input, draft.payload, at
    )
    return Entry(
        saga_id=draft.saga_id,
        seq=seq,
        tool_name=draft.tool_name,
        phase=phase,
        input=draft.input,
        payload=draft.payload,
        timestamp=at,
        hash=digest,
    )
