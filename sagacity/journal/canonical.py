"""Canonical JSON text for tool inputs and results, and the input hash approvals are checked against."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def parse_json(text: str | bytes) -> Any:
    """``json.loads``, with JSON nested too deep for the parser (a ``RecursionError``) reported as
    the ``ValueError`` any malformed JSON raises: files a verifier reads may hold anything."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None


def to_json(value: Any) -> str:
    """Deterministic JSON: sorted keys, no spaces, UTF-8 kept as text (NUL escaped as ``\\u0000``).

    Raises ``TypeError``/``ValueError`` when ``value`` is not plain JSON data.
    """
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def input_hash(input_json: str) -> str:
    """SHA-256 (hex) of a journaled input's UTF-8 text; what an approval is verified against."""
    return hashlib.sha256(input_json.encode("utf-8")).hexdigest()
