"""Redaction rules: keep secrets and personal data out of the journal, and say what was kept out.

Pure. A rule names a field; wherever a JSON object in a tool's input or result has a key that
matches, the value is replaced before the row is journaled (and hashed):

* ``redact``: by ``{"$redacted": "removed"}``;
* ``hash``: by ``{"$redacted": "sha256:<hex>"}``, so someone who knows the value can show it was
  that one. The digest is of the UTF-8 text of a string value, or of the canonical JSON of any
  other value. A value that is easy to guess (an email, a card's last digits) can be found from
  its digest by trying candidates: redact those instead.

Keys match by words, case-insensitively: ``api_key`` matches ``api_key``, ``X-Api-Key``,
``apiKey`` and ``stripe_api_key``; ``token`` matches ``refresh_token`` but not ``tokens_used``
(its word is ``tokens``).
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any, Generic, TypeVar

from sagacity.journal import Draft, to_json

__all__ = ["DEFAULT_RULES", "MARKER", "Action", "Redacted", "Redactor", "Rule"]

T = TypeVar("T")

#: The key of the object that replaces a redacted value.
MARKER = "$redacted"


class Action(StrEnum):
    REDACT = "redact"
    HASH = "hash"


_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|\d+")


@lru_cache(maxsize=4096)
def words(name: str) -> tuple[str, ...]:
    """``name`` split into lowercase words at separators and camelCase humps."""
    return tuple(w.lower() for w in _WORD.findall(name))


@dataclass(frozen=True, slots=True)
class Rule:
    """Redact (or hash) every field whose key contains the words of ``field``, in ``tools``."""

    field: str
    action: Action = Action.REDACT
    #: shell-style pattern of the tool names the rule applies to
    tools: str = "*"

    def matches(self, key_words: tuple[str, ...]) -> bool:
        want = words(self.field)  # cached: rules are few, and checked for every key
        return any(
            key_words[i : i + len(want)] == want for i in range(len(key_words) - len(want) + 1)
        )


#: Secrets, by the names they usually go by. Applied to every tool unless replaced.
DEFAULT_RULES: tuple[Rule, ...] = tuple(
    Rule(name)
    for name in (
        "api_key",
        "apikey",
        "token",
        "password",
        "passwd",
        "passphrase",
        "secret",
        "authorization",
        "cookie",
        "private_key",
        "credentials",
    )
)


@dataclass(frozen=True, slots=True)
class Redacted(Generic[T]):
    """A value with its secrets replaced, and where they were (JSON Pointers, RFC 6901)."""

    value: T
    paths: tuple[str, ...] = ()


def _pointer(parts: Iterable[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _marker(action: Action, value: Any) -> dict[str, str]:
    if action is Action.REDACT:
        return {MARKER: "removed"}
    text = value if isinstance(value, str) else to_json(value)
    return {MARKER: "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()}


def _is_marker(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {MARKER}


@lru_cache(maxsize=8192)
def _first_match(rules: tuple[Rule, ...], key: str) -> Rule | None:
    """The first of ``rules`` whose field is in ``key``; keys repeat from call to call."""
    key_words = words(key)
    return next((r for r in rules if r.matches(key_words)), None)


class Redactor:
    """Applies rules to tool inputs and results; :meth:`draft` is the one call before journaling."""

    def __init__(self, rules: Iterable[Rule] = DEFAULT_RULES) -> None:
        self.rules = tuple(rules)
        # every journal row asks, so each tool's rules and each key's verdict are worked out once
        self._for_tool = lru_cache(maxsize=1024)(self._rules_for)

    def _rules_for(self, tool_name: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if fnmatch.fnmatchcase(tool_name, r.tools))

    def apply(self, tool_name: str, value: Any) -> Redacted[Any]:
        """``value`` (JSON data) with matching fields replaced; ``value`` itself is not changed."""
        rules = self._for_tool(tool_name)
        if not rules:
            return Redacted(value)
        paths: list[str] = []

        def walk(node: Any, at: tuple[str | int, ...]) -> Any:
            if isinstance(node, dict):
                if _is_marker(node):
                    return node  # already redacted: redacting again would hash the marker
                out = {}
                for key, item in node.items():
                    rule = _first_match(rules, str(key))
                    if rule is None or _is_marker(item):
                        out[key] = walk(item, (*at, key))
                    else:
                        out[key] = _marker(rule.action, item)
                        paths.append(_pointer((*at, key)))
                return out
            if isinstance(node, list):
                return [walk(item, (*at, i)) for i, item in enumerate(node)]
            return node

        redacted = walk(value, ())
        return Redacted(redacted, tuple(paths)) if paths else Redacted(value)

    def text(self, tool_name: str, json_text: str) -> Redacted[str]:
        """Redact JSON text; text that is not JSON, or needs nothing redacted, is kept byte for byte."""
        try:
            value = json.loads(json_text)
        except ValueError:
            return Redacted(json_text)
        done = self.apply(tool_name, value)
        return Redacted(to_json(done.value), done.paths) if done.paths else Redacted(json_text)

    def draft(self, draft: Draft) -> Redacted[Draft]:
        """``draft`` with its input and payload redacted; paths start ``/input`` or ``/payload``."""
        input_ = self.text(draft.tool_name, draft.input)
        payload = self.text(draft.tool_name, draft.payload)
        paths = tuple("/input" + p for p in input_.paths) + tuple(
            "/payload" + p for p in payload.paths
        )
        if not paths:
            return Redacted(draft)
        return Redacted(replace(draft, input=input_.value, payload=payload.value), paths)
