"""Approval rules as data: how they judge a call's arguments (never raising), which are refused
where the tool is declared, how they travel in the catalog a saga records, and what an agent's
model is told about them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

import sagacity
from sagacity import ApprovalRule, CompensationContext, Reversibility, ToolRegistry, compensable
from sagacity.agents.tools import _description
from sagacity.errors import ToolDeclarationError
from sagacity.rules import ALWAYS, MAX_DEPTH, asks, describe, judge, problems
from sagacity.temporal.activities.tools import catalog
from sagacity.temporal.models import ToolSpec

LARGE = ApprovalRule(name="large refund", field="amount", op=">", value=1000)


def undo(ctx: CompensationContext) -> None:
    """Nothing to undo in these tests."""


@pytest.mark.parametrize(
    ("rule", "args", "why"),
    [
        (LARGE, {"amount": 1500}, "rule 'large refund': amount 1500 > 1000"),
        (LARGE, {"amount": 1000}, None),
        (LARGE, {"amount": 1000.5}, "rule 'large refund': amount 1000.5 > 1000"),
        (
            ApprovalRule(field="amount", op=">=", value=1000),
            {"amount": 1000},
            "rule 'amount >= 1000': amount 1000 >= 1000",
        ),
        (
            ApprovalRule(field="amount", op="<", value=0),
            {"amount": -5},
            "rule 'amount < 0': amount -5 < 0",
        ),
        (ApprovalRule(field="amount", op="<=", value=0), {"amount": 1}, None),
        (
            ApprovalRule(field="currency", op="==", value="EUR"),
            {"currency": "EUR"},
            'rule \'currency == "EUR"\': currency "EUR" == "EUR"',
        ),
        (ApprovalRule(field="currency", op="!=", value="EUR"), {"currency": "EUR"}, None),
        (
            ApprovalRule(field="to.country", op="in", value=["IR", "KP"]),
            {"to": {"country": "KP"}},
            'rule \'to.country in ["IR", "KP"]\': to.country "KP" in ["IR", "KP"]',
        ),
        (
            ApprovalRule(field="items.1.qty", op=">", value=9),
            {"items": [{"qty": 1}, {"qty": 10}]},
            "rule 'items.1.qty > 9': items.1.qty 10 > 9",
        ),
        # JSON's true is not 1, and a number is not a text
        (ApprovalRule(field="vip", op="==", value=1), {"vip": True}, None),
        (
            ApprovalRule(field="vip", op="==", value=True),
            {"vip": True},
            "rule 'vip == true': vip true == true",
        ),
        # what cannot be judged needs approval, and says why
        (LARGE, {}, "rule 'large refund': amount is missing, so a human decides"),
        (
            LARGE,
            {"amount": "lots"},
            "rule 'large refund': amount \"lots\" cannot be compared by '>', so a human decides",
        ),
        (
            LARGE,
            {"amount": True},
            "rule 'large refund': amount true cannot be compared by '>', so a human decides",
        ),
        (
            LARGE,
            {"amount": None},
            "rule 'large refund': amount null cannot be compared by '>', so a human decides",
        ),
        (ALWAYS, {}, "rule 'always': every call of this tool needs approval"),
    ],
)
def test_a_rule_judges_the_arguments(
    rule: ApprovalRule, args: dict[str, Any], why: str | None
) -> None:
    assert problems(rule) == []
    assert asks(rule, args) == why


def test_any_of_and_all_of_take_the_first_deciding_rule_and_unknowns_ask() -> None:
    foreign = ApprovalRule(name="foreign", field="country", op="!=", value="NL")
    risky = ApprovalRule(name="risky", any_of=[LARGE, foreign])
    both = ApprovalRule(name="large and foreign", all_of=[LARGE, foreign])
    assert asks(risky, {"amount": 5, "country": "DE"}) == 'rule \'risky\': country "DE" != "NL"'
    assert asks(risky, {"amount": 5, "country": "NL"}) is None
    assert asks(both, {"amount": 5000, "country": "DE"}) == (
        'rule \'large and foreign\': amount 5000 > 1000 and country "DE" != "NL"'
    )
    assert asks(both, {"amount": 5, "country": "DE"}) is None  # one False decides all_of
    # one rule cannot tell and none asks: the call needs approval
    assert judge(risky, {"amount": 5}).asks is None
    assert asks(risky, {"amount": 5}) == "rule 'risky': country is missing, so a human decides"
    assert describe(ApprovalRule(any_of=[LARGE, foreign])) == "(large refund or foreign)"


def test_judging_never_raises() -> None:
    # built around the checks (as a forged catalog could be): judged, not raised
    odd = ApprovalRule.model_construct(field="amount", op=">", value=object(), name="odd")
    assert judge(odd, {"amount": 3}).asks is None
    assert asks(odd, {"amount": 3}) is not None
    weird = ApprovalRule.model_construct(field="amount", op="~", value=1, name="weird")
    assert (
        asks(weird, {"amount": 3})
        == "rule 'weird': amount 3 cannot be compared by '~', so a human decides"
    )
    deep = LARGE
    for _ in range(MAX_DEPTH + 2):
        deep = ApprovalRule(any_of=[deep])
    assert judge(deep, {"amount": 1}).asks is None
    assert asks(LARGE, {"amount": 10**400}) == f"rule 'large refund': amount {10**400} > 1000"


@pytest.mark.parametrize(
    ("rule", "said"),
    [
        (ApprovalRule(name="r", field="", op=">", value=1), "rule 'r' has an empty field path ''"),
        (
            ApprovalRule(name="r", field="a..b", op=">", value=1),
            "rule 'r' has an empty field path 'a..b'",
        ),
        (ApprovalRule(name="r", field="a", op="=~", value=1), "rule 'r' has unknown op '=~'"),  # type: ignore[arg-type]
        (
            ApprovalRule(name="r", field="a", op="in", value="IR"),
            "rule 'r': 'in' takes a list of values",
        ),
        (
            ApprovalRule(name="r", field="a", op=">", value=None),
            "rule 'r': '>' takes a number or a text, not null",
        ),
        (
            ApprovalRule(name="r"),
            "rule 'r' must be one of: field/op/value, any_of, all_of or always",
        ),
        (
            ApprovalRule(name="r", always=True, field="a", op=">", value=1),
            "rule 'r' must be one of",
        ),
        (
            ApprovalRule(
                name="r",
                any_of=[ApprovalRule(name="inner", field="a", op="?", value=1)],  # type: ignore[arg-type]
            ),
            "rule 'inner' has unknown op '?'",
        ),
        (
            ApprovalRule(name="r", field="a", op="==", value={1, 2}),
            "rule 'r': value {1, 2} is not JSON data",
        ),
    ],
)
def test_a_bad_rule_is_refused_where_the_tool_is_declared_naming_the_tool(
    rule: ApprovalRule, said: str
) -> None:
    with pytest.raises(ToolDeclarationError, match=r"^tool 'refund': needs_approval ") as raised:

        @compensable(by=undo, needs_approval=rule)
        def refund(order_id: str, amount: int) -> str:
            return order_id

    assert said in str(raised.value)


def test_an_irreversible_tool_takes_true_and_refuses_a_condition() -> None:
    @compensable(reversibility=Reversibility.IRREVERSIBLE, needs_approval=True)
    def wire(amount: int) -> str:
        return "sent"

    assert wire.options.approval == ALWAYS
    with pytest.raises(
        ToolDeclarationError, match="'wire2' is IRREVERSIBLE, so every call already"
    ):

        @compensable(reversibility=Reversibility.IRREVERSIBLE, needs_approval=LARGE, name="wire2")
        def wire_again(amount: int) -> str:
            return "sent"

    def predicate(args: dict[str, Any]) -> bool:  # as an Agents SDK tool's needs_approval is
        return True

    a_function: Any = predicate
    with pytest.raises(
        ToolDeclarationError, match="a function cannot be judged the same way on replay"
    ):

        @compensable(by=undo, needs_approval=a_function)
        def refund(amount: int) -> str:
            return "r"


def test_the_rule_travels_in_the_catalog_and_old_catalogs_still_decode() -> None:
    @compensable(by=undo, needs_approval=LARGE)
    def refund(order_id: str, amount: int) -> str:
        return order_id

    @compensable(by=undo, needs_approval=True)
    def note(text: str) -> str:
        return text

    @compensable(by=undo)
    def plain(text: str) -> str:
        return text

    specs = {s.name: s for s in catalog(ToolRegistry([refund, note, plain]), brief=True)}
    # the brief catalog a saga records carries the rule: workflow code judges with it
    assert specs["refund"].approval == LARGE and specs["note"].approval == ALWAYS
    wire = specs["refund"].model_dump(mode="json")
    assert ToolSpec.model_validate(wire) == specs["refund"]
    # a tool with no rule: its spec's payload is as before (the field left out), and an older
    # history's spec, which has no such field, reads as no rule
    plain_wire = specs["plain"].model_dump(mode="json")
    assert "approval" not in plain_wire
    assert ToolSpec.model_validate(plain_wire).approval is None


def test_the_agents_model_is_told_which_calls_wait() -> None:
    spec = ToolSpec(
        name="refund",
        description="Refund the customer.",
        reversibility=Reversibility.REVERSIBLE,
        idempotent=False,
        has_compensation=True,
        timeout_s=60,
        heartbeat_timeout_s=30,
        approval=LARGE,
    )
    assert _description(spec) == (
        "Refund the customer. (A call where amount > 1000 waits until a human approves it, "
        "and may be rejected.)"
    )
    always = spec.model_copy(update={"approval": ALWAYS})
    assert "(Each call waits until a human approves it" in _description(always)
    assert _description(spec.model_copy(update={"approval": None})) == "Refund the customer."


def test_approval_rule_is_a_public_name() -> None:
    assert "ApprovalRule" in sagacity.__all__ and sagacity.ApprovalRule is ApprovalRule


def test_the_readme_rule_declares_a_refund_that_waits_over_1000() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text(encoding="utf-8")
    section = readme.split("### Rules: approval for some calls of any tool\n", 1)[1]
    (code,) = re.findall(r"```python\n(.*?)```", section.split("\n### ", 1)[0], flags=re.DOTALL)
    namespace: dict[str, Any] = {"__name__": "readme_rules"}
    exec(compile(code, "README.md", "exec"), namespace)
    (spec,) = catalog(ToolRegistry([namespace["refund"]]), brief=True)
    assert spec.approval is not None and spec.reversibility is Reversibility.REVERSIBLE
    assert asks(spec.approval, {"order_id": "o-1", "amount": 1500}) == (
        "rule 'large refund': amount 1500 > 1000"
    )
    assert asks(spec.approval, {"order_id": "o-1", "amount": 500}) is None
