"""Redaction rules: keep secrets and personal data out of the journal, and say what was kept out.

Pure. A rule names a field; wherever a JSON object in a tool's input or result has a key that
matches, the value is replaced in what is written (journal rows, approval requests, the saga's
status and result), never in what runs:

* ``redact`` (the default): by a keyed fingerprint, ``{"$redacted": "hmac:<key id>:<hex>"}``,
  the HMAC-SHA256 of the value under the redactor's :class:`FingerprintKey`, so different values
  look different and, without the key, trying candidates finds nothing. Without a key, by
  ``{"$redacted": "removed"}``;
* ``remove``: by ``{"$redacted": "removed"}``, whatever the key: not even equality shows;
* ``hash``: by the keyed fingerprint too; without a key, by ``{"$redacted": "sha256:<hex>"}``, so
  someone who knows the value can show it was that one (a value that is easy to guess can be
  found from such a digest by trying candidates).

A fingerprint or digest is of the UTF-8 text of a string value, or of the canonical JSON of any
other value.

Keys match by words, case-insensitively: ``api_key`` matches ``api_key``, ``X-Api-Key``,
``apiKey`` and ``stripe_api_key``; ``token`` matches ``refresh_token`` but not ``tokens_used``
(its word is ``tokens``).

Free text, such as an exception's message, is scrubbed by :func:`scrub` (see there): URL
credentials, ``Bearer``/``Basic`` credentials, and the values of names the rules match.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import json
import re
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from enum import StrEnum
from functools import lru_cache
from typing import Any, Generic, TypeVar

from sagacity.journal import Draft, Phase, to_json
from sagacity.journal.results import MARKER, marker_paths
from sagacity.journal.results import is_marker as _is_marker

__all__ = [
    "DEFAULT_RULES",
    "MARKER",
    "Action",
    "FingerprintKey",
    "Redacted",
    "Redactor",
    "Rule",
    "could_be",
    "hidden_paths",
    "parse_rules",
    "scrub",
]

T = TypeVar("T")


class Action(StrEnum):
    REDACT = "redact"
    HASH = "hash"
    REMOVE = "remove"


@dataclass(frozen=True, slots=True)
class FingerprintKey:
    """The secret redaction fingerprints are keyed with; ``id`` names it in every fingerprint."""

    secret: bytes = field(repr=False)

    def __post_init__(self) -> None:
        if len(self.secret) < 16:
            raise ValueError("a fingerprint key needs at least 16 bytes")

    @property
    def id(self) -> str:
        """16 hex digits that tell keys apart (and reveal nothing of the secret)."""
        return hashlib.sha256(b"sagacity-fingerprint-key-id\n" + self.secret).hexdigest()[:16]

    def fingerprint(self, text: str) -> str:
        """``hmac:<key id>:<hex>``, the HMAC-SHA256 of ``text``'s UTF-8 bytes."""
        digest = hmac.new(self.secret, text.encode("utf-8"), hashlib.sha256).hexdigest()
        return f"hmac:{self.id}:{digest}"


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


def parse_rules(text: str) -> tuple[Rule, ...]:
    """Rules from ``field[:action][@tool-pattern]`` items separated by commas.

    ``card_number:hash@pay_*`` hashes ``card_number`` in the tools whose names match ``pay_*``;
    the action defaults to ``redact`` and the pattern to every tool. :class:`ValueError` names
    the first item that is not a rule.
    """
    rules = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        spec, _, tools = (s.strip() for s in item.partition("@"))
        field, sep, action = (s.strip() for s in spec.partition(":"))
        if not words(field):
            raise ValueError(f"{item!r}: no field name (letters or digits) before ':' or '@'")
        if sep and action not in set(Action):
            raise ValueError(
                f"{item!r}: the action is 'redact', 'remove' or 'hash', not {action!r}"
            )
        if "@" in item and not tools:
            raise ValueError(f"{item!r}: no tool pattern after '@'")
        rules.append(Rule(field, Action(action) if sep else Action.REDACT, tools or "*"))
    return tuple(rules)


@dataclass(frozen=True, slots=True)
class Redacted(Generic[T]):
    """A value with its secrets replaced, and where they were (JSON Pointers, RFC 6901)."""

    value: T
    paths: tuple[str, ...] = ()


def _pointer(parts: Iterable[str | int]) -> str:
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _marker(action: Action, value: Any, key: FingerprintKey | None) -> dict[str, str]:
    if action is Action.REMOVE or (action is Action.REDACT and key is None):
        return {MARKER: "removed"}
    text = value if isinstance(value, str) else to_json(value)
    if key is not None:
        return {MARKER: key.fingerprint(text)}
    return {MARKER: "sha256:" + hashlib.sha256(text.encode("utf-8")).hexdigest()}


def could_be(journaled: Any, original: Any) -> bool:
    """Whether ``journaled`` (JSON data as a row holds it) records ``original``: equal, except
    where it holds a redaction marker, which stands for any value (rules or keys may since have
    changed, so the marker is not made again)."""
    if _is_marker(journaled):
        return True
    if isinstance(journaled, dict):
        return (
            isinstance(original, dict)
            and journaled.keys() == original.keys()
            and all(could_be(journaled[k], original[k]) for k in journaled)
        )
    if isinstance(journaled, list):
        return (
            isinstance(original, list)
            and len(journaled) == len(original)
            and all(could_be(j, o) for j, o in zip(journaled, original, strict=True))
        )
    return bool(journaled == original)


def hidden_paths(json_text: str) -> tuple[str, ...]:
    """Where redaction markers stand in JSON text (JSON Pointers): the fields it hides.

    Text that is not JSON hides nothing.
    """
    try:
        value = json.loads(json_text)
    except (ValueError, RecursionError):
        return ()
    return marker_paths(value)


@lru_cache(maxsize=8192)
def _first_match(rules: tuple[Rule, ...], key: str) -> Rule | None:
    """The first of ``rules`` whose field is in ``key``; keys repeat from call to call."""
    key_words = words(key)
    return next((r for r in rules if r.matches(key_words)), None)


_TEXT_MARKER = re.compile(r"\[(?:redacted|sha256:[0-9a-f]{64})\]")
# lengths are bounded and names start where a word does, so scrubbing stays linear in the text
# a credential after its scheme: kept when it is a plain lowercase word ("the bearer of")
_SCHEME = r"(?i:bearer|basic)\s+"
_CREDENTIAL = r"[\w\-.~+/]+=*"
_SCHEME_CREDENTIAL = re.compile(rf"(?P<scheme>{_SCHEME})(?P<value>{_CREDENTIAL})")
_USERINFO = re.compile(r"(?P<scheme>(?<![\w+.\-])[a-zA-Z][\w+.\-]{0,31}://)(?P<value>[^\s/?#]+)@")
# a bare value: up to a separator, and not ending in punctuation ("token=x, more")
_VALUE = r"[^\s&#;\"'<>()\[\]{}]*[^\s&#;,.:\"'<>()\[\]{}]"
# name=value, as in a query string or a log line; the value ends at a separator of either
_PAIR = re.compile(
    r"(?<![\w.\-])(?P<name>[A-Za-z_][\w.\-]{0,199})=(?P<value>"
    rf"{_TEXT_MARKER.pattern}|\"[^\"]*\"|'[^']*'|(?:{_SCHEME})?{_VALUE})"
)
# "name": "value" or 'name': 'value' (JSON, a Python dict's repr), or a bare scalar value
_QUOTED_PAIR = re.compile(
    r"(?P<q>[\"'])(?P<name>[^\"'\s]{1,200})(?P=q)\s*:\s*(?P<value>"
    r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'|[^\s,\"'{}\[\]]+)"
)


def _text_marker(action: Action, value: str) -> str:
    if action is Action.REDACT:
        return "[redacted]"
    return "[sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest() + "]"


def _keep_quotes(value: str, marker: str) -> str:
    """``marker`` in place of ``value``, inside the quotes ``value`` had."""
    if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
        return value[0] + marker + value[0]
    return marker


def scrub(text: str, rules: Iterable[Rule] = DEFAULT_RULES) -> str:
    """``text`` with its credentials replaced by ``[redacted]`` (or ``[sha256:<hex>]``).

    Whatever the rules: the userinfo of a URL (``https://[redacted]@host``) and the credential
    after ``Bearer`` or ``Basic``, unless it is a plain lowercase word. By the rules, matching
    names by words as for JSON keys: ``name=value`` (query parameters too) and ``"name": value``
    or ``'name': value``. So ``api_key=sk-1`` becomes ``api_key=[redacted]``, and with the
    default rules ``token_count=5`` is scrubbed (its words hold ``token``, as the same JSON
    key would be) while ``tokens_used=5`` is not. Scrubbing scrubbed text changes nothing.
    """
    rules = tuple(rules)

    def pair(match: re.Match[str]) -> str:
        value = match["value"]
        rule = _first_match(rules, match["name"]) if rules else None
        if rule is None or _TEXT_MARKER.fullmatch(value.strip("\"'")):
            return match[0]
        marker = _text_marker(rule.action, value.strip("\"'"))
        return match[0][: match.start("value") - match.start()] + _keep_quotes(value, marker)

    def credential(match: re.Match[str]) -> str:
        value = match["value"]
        if (value.isalpha() and value.islower()) or _TEXT_MARKER.fullmatch(value):
            return match[0]
        return match["scheme"] + "[redacted]"

    def userinfo(match: re.Match[str]) -> str:
        if _TEXT_MARKER.fullmatch(match["value"]):
            return match[0]
        return match["scheme"] + "[redacted]@"

    text = _QUOTED_PAIR.sub(pair, text)
    text = _PAIR.sub(pair, text)
    text = _SCHEME_CREDENTIAL.sub(credential, text)
    return _USERINFO.sub(userinfo, text)


#: inputs up to this many characters keep their redaction for the call's next row
_CACHED_INPUT = 4096
#: the inputs kept so, the oldest dropped first
_CACHED_INPUTS = 256
#: rows whose payload carries exception text, scrubbed before they are journaled
_ERROR_PHASES = frozenset({Phase.FAILED, Phase.COMPENSATION_FAILED})


class Redactor:
    """Applies rules to tool inputs and results; :meth:`draft` is the one call before journaling."""

    def __init__(
        self, rules: Iterable[Rule] = DEFAULT_RULES, *, key: FingerprintKey | None = None
    ) -> None:
        self.rules = tuple(rules)
        #: keys fingerprints; without one, ``redact`` removes and ``hash`` digests unkeyed
        self.key = key
        # every journal row asks, so each tool's rules and each key's verdict are worked out once
        self._for_tool = lru_cache(maxsize=1024)(self._rules_for)
        self._rule_for_key = lru_cache(maxsize=4096)(self._first_rule)
        # a call's input is journaled twice (INTENT, then its outcome row): redacted once per
        # fingerprint key, kept under the input's digest (the input itself, secrets and all,
        # does not stay in memory for it)
        self._inputs: OrderedDict[tuple[str, bytes, FingerprintKey | None], Redacted[str]] = (
            OrderedDict()
        )

    def _rules_for(self, tool_name: str) -> tuple[Rule, ...]:
        return tuple(r for r in self.rules if fnmatch.fnmatchcase(tool_name, r.tools))

    def _first_rule(self, tool_name: str, key: str) -> Rule | None:
        return _first_match(self._for_tool(tool_name), key)

    def _input(self, tool_name: str, json_text: str) -> Redacted[str]:
        """:meth:`text` of a call's input, worked out once for its INTENT and outcome rows."""
        if len(json_text) > _CACHED_INPUT:
            return self.text(tool_name, json_text)
        at = (tool_name, hashlib.sha256(json_text.encode()).digest(), self.key)
        found = self._inputs.get(at)
        if found is None:
            found = self._inputs[at] = self.text(tool_name, json_text)
            if len(self._inputs) > _CACHED_INPUTS:
                self._inputs.popitem(last=False)
        return found

    def apply(self, tool_name: str, value: Any) -> Redacted[Any]:
        """``value`` (JSON data) with matching fields replaced; ``value`` itself is not changed."""
        rules = self._for_tool(tool_name)
        if not rules:
            return Redacted(value)
        paths: list[str] = []
        redacted = self._walk(tool_name, value, (), paths)
        return Redacted(redacted, tuple(paths)) if paths else Redacted(value)

    def _walk(self, tool_name: str, node: Any, at: tuple[str | int, ...], paths: list[str]) -> Any:
        """``node`` with matching fields replaced, their pointers added to ``paths``. A method,
        not a closure calling itself: that closure is a reference cycle per redacted value, which
        only the cyclic garbage collector frees."""
        if isinstance(node, dict):
            if _is_marker(node):
                return node  # already redacted: redacting again would hash the marker
            out = {}
            for key, item in node.items():
                rule = self._rule_for_key(tool_name, str(key))
                if rule is None or _is_marker(item):
                    out[key] = self._walk(tool_name, item, (*at, key), paths)
                else:
                    out[key] = _marker(rule.action, item, self.key)
                    paths.append(_pointer((*at, key)))
            return out
        if isinstance(node, list):
            return [self._walk(tool_name, item, (*at, i), paths) for i, item in enumerate(node)]
        return node

    def scrub(self, tool_name: str, text: str) -> str:
        """``text`` (an exception's message, say) scrubbed with the rules of ``tool_name``."""
        return scrub(text, self._for_tool(tool_name))

    def text(self, tool_name: str, json_text: str) -> Redacted[str]:
        """Redact JSON text; text that is not JSON, or needs nothing redacted, is kept byte for byte."""
        if not json_text:
            return Redacted(json_text)  # a row without input or payload: nothing to parse
        try:
            value = json.loads(json_text)
        except ValueError:
            return Redacted(json_text)
        done = self.apply(tool_name, value)
        return Redacted(to_json(done.value), done.paths) if done.paths else Redacted(json_text)

    def scrub_value(self, tool_name: str, value: Any) -> Any:
        """``value`` (an exception's details, say) as it may leave the worker: fields the rules
        match replaced as in :meth:`apply`, every string scrubbed, and anything that is not JSON
        data (tuples are lists) given as its scrubbed ``repr``."""

        def walk(node: Any) -> Any:
            if isinstance(node, str):
                return self.scrub(tool_name, node)
            if isinstance(node, dict):
                return {str(key): walk(item) for key, item in node.items()}
            if isinstance(node, list | tuple):
                return [walk(item) for item in node]
            if node is None or isinstance(node, bool | int | float):
                return node
            return self.scrub(tool_name, repr(node))

        return self.apply(tool_name, walk(value)).value

    def _scrub_strings(self, tool_name: str, json_text: str) -> str:
        """Every string in JSON text scrubbed; text that is not JSON is scrubbed as a whole."""
        try:
            value = json.loads(json_text)
        except ValueError:
            return self.scrub(tool_name, json_text)
        scrubbed = self.scrub_value(tool_name, value)
        return json_text if scrubbed == value else to_json(scrubbed)

    def draft(self, draft: Draft) -> Redacted[Draft]:
        """``draft`` with its input and payload redacted; paths start ``/input`` or ``/payload``.

        A FAILED or COMPENSATION_FAILED payload holds exception text: its strings are scrubbed
        too (this is not listed in the paths, which name whole fields).
        """
        input_ = self._input(draft.tool_name, draft.input)
        payload = self.text(draft.tool_name, draft.payload)
        paths = tuple("/input" + p for p in input_.paths) + tuple(
            "/payload" + p for p in payload.paths
        )
        text = payload.value
        if draft.phase in _ERROR_PHASES and text:
            text = self._scrub_strings(draft.tool_name, text)
        if not paths and text == draft.payload:
            return Redacted(draft)
        return Redacted(replace(draft, input=input_.value, payload=text), paths)
