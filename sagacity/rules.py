"""Approval rules: declarative conditions over a call's arguments that say it needs a human first.

A rule is data, not a function: it travels in the tool catalog a saga records, so workflow code
judges each call the same way on every replay. Judging never raises. A field the arguments lack,
or a value the comparison cannot take (a text compared with a number), cannot be judged: the
call then needs approval (the safe side), and the sentence says why.
"""

from __future__ import annotations

import json
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "ALWAYS",
    "ApprovalRule",
    "Op",
    "Verdict",
    "asks",
    "judge",
    "problems",
    "refusal",
    "request_reason",
]

#: the comparisons a rule may make of a field with its value
Op = Literal[">", ">=", "<", "<=", "==", "!=", "in"]
OPS: frozenset[str] = frozenset({">", ">=", "<", "<=", "==", "!=", "in"})
_ORDERED = frozenset({">", ">=", "<", "<="})
#: the key of the object the journal puts in place of a redacted value
REDACTED = "$redacted"
#: how deep rules may nest: deeper is a mistake, and bounds the work of judging one
MAX_DEPTH = 8

if TYPE_CHECKING:
    _OpField = Op | Literal[""]
else:
    # any text is taken when the rule is built, so a wrong one is refused where the tool is
    # declared, by a ToolDeclarationError naming the tool (a type checker still sees the Literal)
    _OpField = str


class ApprovalRule(BaseModel):
    """When a call of a tool needs a human's approval, judged on its arguments.

    One of: a comparison (``field``, ``op``, ``value``: ``field`` is a dotted path into the
    arguments, ``items.0.price``), ``any_of`` / ``all_of`` other rules, or ``always``::

        ApprovalRule(name="large refund", field="amount", op=">", value=1000)
    """

    model_config = ConfigDict(frozen=True)

    #: named in the journal and to approvers ("rule 'large refund': amount 1500 > 1000")
    name: str = ""
    field: str = ""
    op: _OpField = ""
    #: JSON data; for ``in``, a list
    value: Any = None
    any_of: list[ApprovalRule] = Field(default_factory=list)
    all_of: list[ApprovalRule] = Field(default_factory=list)
    always: bool = False

    def wire(self) -> dict[str, Any]:
        """The rule as JSON data, fields at their default left out."""
        return self.model_dump(mode="json", exclude_defaults=True)

    @property
    def label(self) -> str:
        """The rule's name, or what it compares when it has none."""
        return self.name or describe(self)


#: ``needs_approval=True``: every call waits for a human
ALWAYS = ApprovalRule(name="always", always=True)


@dataclass(frozen=True, slots=True)
class Verdict:
    """A rule judged on one call: ``asks`` True (it matches), False, or None (cannot tell)."""

    asks: bool | None
    why: str


def describe(rule: ApprovalRule) -> str:
    """The rule as an expression: ``amount > 1000``, ``(a or b)``, ``always``."""
    if rule.always:
        return "always"
    if rule.any_of or rule.all_of:
        joint = " or " if rule.any_of else " and "
        return "(" + joint.join(r.label for r in rule.any_of or rule.all_of) + ")"
    return f"{rule.field} {rule.op} {_show(rule.value)}"


def problems(rule: ApprovalRule, *, depth: int = 0) -> list[str]:
    """What is wrong with ``rule`` (empty: it can be judged)."""
    where = f"rule {rule.label!r}"
    if depth >= MAX_DEPTH:
        return [f"{where} nests deeper than {MAX_DEPTH} rules"]
    kinds = [bool(rule.field or rule.op), bool(rule.any_of), bool(rule.all_of), rule.always]
    if sum(kinds) != 1:
        return [f"{where} must be one of: field/op/value, any_of, all_of or always"]
    if rule.any_of or rule.all_of:
        return [p for r in rule.any_of or rule.all_of for p in problems(r, depth=depth + 1)]
    if rule.always:
        return []
    found = []
    if not rule.field or "" in rule.field.split("."):
        found.append(f"{where} has an empty field path {rule.field!r}")
    if rule.op not in OPS:
        found.append(f"{where} has unknown op {rule.op!r} (one of {', '.join(sorted(OPS))})")
    elif rule.op == "in" and not isinstance(rule.value, list):
        found.append(f"{where}: 'in' takes a list of values")
    elif rule.op in _ORDERED and not (_number(rule.value) or isinstance(rule.value, str)):
        found.append(f"{where}: {rule.op!r} takes a number or a text, not {_show(rule.value)}")
    if not _json_like(rule.value):
        found.append(f"{where}: value {rule.value!r} is not JSON data")
    return found


def refusal(tool: str, rule: ApprovalRule | None, irreversible: bool) -> str | None:
    """Why ``tool`` may not be declared with ``rule`` as its ``needs_approval``; None if it may.

    An IRREVERSIBLE tool always waits for approval, so only ``True`` (redundant) is taken there:
    a condition would read as if calls it does not match ran unapproved.
    """
    if rule is None:
        return None
    if not isinstance(rule, ApprovalRule):
        return (
            f"tool {tool!r}: needs_approval takes True or an ApprovalRule, not {rule!r} "
            "(a function cannot be judged the same way on replay: write it as an ApprovalRule)"
        )
    if irreversible and rule != ALWAYS:
        return (
            f"tool {tool!r} is IRREVERSIBLE, so every call already waits for approval: "
            f"drop needs_approval={rule.label!r}"
        )
    found = problems(rule)
    return f"tool {tool!r}: needs_approval {'; '.join(found)}" if found else None


def judge(rule: ApprovalRule, args: Mapping[str, Any], hidden: Collection[str] = ()) -> Verdict:
    """Judge ``rule`` on a call's arguments; never raises.

    ``hidden``: JSON Pointers of argument values a sentence must not show (redacted fields).
    """
    try:
        return _judge(rule, args, hidden, 0)
    except Exception as exc:  # a rule that slipped past problems(): judged unknown, not raised
        return Verdict(None, f"{rule.label} could not be judged ({type(exc).__name__})")


def asks(rule: ApprovalRule, args: Mapping[str, Any], hidden: Collection[str] = ()) -> str | None:
    """Why ``rule`` asks for approval of this call, as a sentence; None when it does not."""
    verdict = judge(rule, args, hidden)
    if verdict.asks is False:
        return None
    why = verdict.why if verdict.asks else f"{verdict.why}, so a human decides"
    return f"rule {rule.label!r}: {why}"


def request_reason(rule: ApprovalRule, input_json: str, hidden: Collection[str] = ()) -> str:
    """The sentence an approval request's row gives for ``rule`` asking about this input."""
    try:
        args = json.loads(input_json) if input_json else {}
    except ValueError:
        args = {}
    return asks(rule, args if isinstance(args, Mapping) else {}, hidden) or (
        f"rule {rule.label!r} asked"  # the workflow judged it asks; its input says otherwise
    )


def requested_by(payload: Mapping[str, Any] | None) -> ApprovalRule | None:
    """The rule an AWAITING_APPROVAL row's payload names (None: an unconditional request, or a
    payload that names no rule that can be judged)."""
    if payload is None or not isinstance(payload.get("condition"), dict):
        return None
    try:
        rule = ApprovalRule.model_validate(payload["condition"])
    except ValueError:
        return None
    return None if problems(rule) else rule


def _judge(rule: ApprovalRule, args: Any, hidden: Collection[str], depth: int) -> Verdict:
    if depth >= MAX_DEPTH:
        return Verdict(None, f"{rule.label} nests too deep")
    if rule.always:
        return Verdict(True, "every call of this tool needs approval")
    if rule.any_of or rule.all_of:
        verdicts = [_judge(r, args, hidden, depth + 1) for r in rule.any_of or rule.all_of]
        decisive = bool(rule.any_of)  # any_of: one True decides; all_of: one False does
        for verdict in verdicts:
            if verdict.asks is decisive:
                return verdict
        unknown = next((v for v in verdicts if v.asks is None), None)
        if unknown is not None:
            return unknown
        return Verdict(not decisive, " and ".join(v.why for v in verdicts))
    found, seen = _lookup(args, rule.field)
    if not found:
        return Verdict(None, f"{rule.field} is missing")
    if isinstance(seen, Mapping) and REDACTED in seen:
        # the journal's marker of a redacted value (a verifier reads the input as stored): its
        # value is unknown, so no comparison can tell, not even != or not in
        return Verdict(None, f"{rule.field} is redacted")
    pointer = "".join("/" + p.replace("~", "~0").replace("/", "~1") for p in rule.field.split("."))
    shown = "(redacted)" if any(_covers(h, pointer) for h in hidden) else _show(seen)
    said = f"{rule.field} {shown} {rule.op} {_show(rule.value)}"
    result = _compare(rule.op, seen, rule.value)
    if result is None:
        return Verdict(None, f"{rule.field} {shown} cannot be compared by {rule.op!r}")
    return Verdict(result, said if result else f"not {said}")


def _lookup(args: Any, path: str) -> tuple[bool, Any]:
    node = args
    for part in path.split("."):
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _compare(op: str, seen: Any, value: Any) -> bool | None:
    """``seen op value``; None when the two cannot be compared that way."""
    if op == "==":
        return _same(seen, value)
    if op == "!=":
        return not _same(seen, value)
    if op == "in":
        return isinstance(value, list) and any(_same(seen, v) for v in value)
    if op not in _ORDERED:
        return None
    if not (_number(seen) and _number(value)) and not (
        isinstance(seen, str) and isinstance(value, str)
    ):
        return None
    if op == ">":
        return bool(seen > value)
    if op == ">=":
        return bool(seen >= value)
    if op == "<":
        return bool(seen < value)
    return bool(seen <= value)


def _number(value: Any) -> bool:
    """A JSON number: an int or a finite float, not a bool."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, float) and math.isfinite(value))


def _same(a: Any, b: Any) -> bool:
    # JSON's true is not 1: Python's True == 1 would make them equal
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a is b
    return bool(a == b)


def _covers(hidden: str, pointer: str) -> bool:
    return pointer == hidden or pointer.startswith(hidden.rstrip("/") + "/")


def _json_like(value: Any) -> bool:
    if value is None or isinstance(value, str | bool) or _number(value):
        return True
    if isinstance(value, list):
        return all(_json_like(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _json_like(v) for k, v in value.items())
    return False


def _show(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True)
    except (TypeError, ValueError):
        return repr(value)
