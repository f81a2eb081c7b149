"""Agent conversations by reference: versions stored in Postgres, named by their hash.

A version is the items one model call added (a JSON list) on top of the version it extends, so
a conversation of n model calls is n rows however long it grows, and a workflow carries a
64-character hash instead of the whole conversation. Each hash covers its base's hash and its
items, so whoever holds the newest hash can tell if any stored version was changed.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sagacity.errors import ConversationTampered
from sagacity.store.db import Pool, translate_errors
from sagacity.store.placement import pool_schema, qualify

__all__ = ["ConversationStore", "ConversationVersion", "version_hash"]

#: Prefix of every hashed version; changes only with the format.
_DOMAIN = b"sagacity-conversation-v1\n"

# Statement templates: {table} is the table in the journal's schema (sagacity.store.placement).
# Insert a version if its base is there (or it has none); say whether the version exists after.
_PUT = """
WITH ins AS (
    INSERT INTO {sagacity_conversation} (saga_id, hash, base_hash, items, length)
    SELECT %(saga_id)s, %(hash)s, %(base)s, %(items)s,
           %(added)s + COALESCE((SELECT length FROM {sagacity_conversation}
                                 WHERE saga_id = %(saga_id)s AND hash = %(base)s), 0)
    WHERE %(base)s::text IS NULL OR EXISTS (
        SELECT FROM {sagacity_conversation} WHERE saga_id = %(saga_id)s AND hash = %(base)s)
    ON CONFLICT (saga_id, hash) DO NOTHING
    RETURNING length
)
SELECT length FROM ins
UNION ALL
SELECT length FROM {sagacity_conversation}
WHERE saga_id = %(saga_id)s AND hash = %(hash)s AND NOT EXISTS (SELECT FROM ins)
"""

# A version and every version under it, newest first.
_GET = """
WITH RECURSIVE chain AS (
    SELECT hash, base_hash, items, 1 AS depth FROM {sagacity_conversation}
    WHERE saga_id = %(saga_id)s AND hash = %(hash)s
    UNION ALL
    SELECT c.hash, c.base_hash, c.items, chain.depth + 1 FROM {sagacity_conversation} c
    JOIN chain ON c.saga_id = %(saga_id)s AND c.hash = chain.base_hash
)
SELECT hash, base_hash, items FROM chain ORDER BY depth
"""


def version_hash(base: str | None, items: str) -> str:
    """The name of a version: SHA-256 over the domain tag, the base's hash and the items' text."""
    digest = hashlib.sha256(_DOMAIN)
    digest.update((base or "").encode("ascii") + b"\n")
    digest.update(items.encode("utf-8"))
    return digest.hexdigest()


@dataclass(frozen=True, slots=True)
class ConversationVersion:
    """A stored version: its hash, and how many items the conversation has up to it."""

    hash: str
    length: int


class ConversationStore:
    """Stores and loads conversation versions over a connection pool."""

    def __init__(self, pool: Pool) -> None:
        self._pool = pool

    async def put(self, saga_id: str, base: str | None, items: list[Any]) -> ConversationVersion:
        """Store ``items`` on top of version ``base`` (None: a new conversation); idempotent.

        :class:`ConversationTampered` when ``base`` is not stored: the caller holds a version
        the database lost.
        """
        text = json.dumps(items, ensure_ascii=False, separators=(",", ":"), sort_keys=True)
        digest = version_hash(base, text)
        params = {
            "saga_id": saga_id,
            "hash": digest,
            "base": base,
            "items": text,
            "added": len(items),
        }
        with translate_errors(f"store a conversation version of saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(qualify(_PUT, await pool_schema(self._pool, conn)), params)
                row = await cur.fetchone()
        if row is None:
            raise ConversationTampered(
                f"saga {saga_id!r}: conversation version {base} is not stored; "
                "the conversation cannot go on from it"
            )
        return ConversationVersion(digest, int(row[0]))

    async def get(self, saga_id: str, version: str) -> list[Any]:
        """Every item of the conversation up to ``version``, oldest first, each version checked."""
        with translate_errors(f"read the conversation of saga {saga_id!r}"):
            async with self._pool.connection() as conn:
                cur = await conn.execute(
                    qualify(_GET, await pool_schema(self._pool, conn)),
                    {"saga_id": saga_id, "hash": version},
                )
                rows = await cur.fetchall()
        versions: list[list[Any]] = []
        expected: str | None = version
        for digest, base, text in rows:
            if digest != expected or version_hash(base, text) != digest:
                raise ConversationTampered(
                    f"saga {saga_id!r}: stored conversation version {digest} does not hash to "
                    "its name: it was changed after it was written"
                )
            versions.append(json.loads(text))
            expected = base
        if expected is not None:
            raise ConversationTampered(
                f"saga {saga_id!r}: conversation version {expected} is missing from the store"
            )
        return [item for added in reversed(versions) for item in added]
