"""docs/decisions.md's rule 4 for requests a ``needs_approval`` rule made: its verifier snippet
and :class:`DecisionCheck` agree that such a request binds its own call, and that a later call
of the tool the rule asks about with no approval is reported."""

from __future__ import annotations

import json

import pytest

from sagacity.evidence.decisions import Statement, signed_row
from sagacity.journal import Entry, to_json
from sagacity.journal.canonical import input_hash
from sagacity.rules import ApprovalRule, request_reason
from tests.docs.test_decisions_doc import AT, SIGNER, WHO, both_verifiers, chain

RULE = ApprovalRule(name="large refund", field="amount", op=">", value=1000)
BIG = to_json({"amount": 1500, "order_id": "o-1"})
SMALL = to_json({"amount": 500, "order_id": "o-2"})
HUGE = to_json({"amount": 2000, "order_id": "o-3"})
HIDDEN = to_json({"amount": {"$redacted": "removed"}, "order_id": "o-4"})


def request_payload(rule: ApprovalRule) -> str:
    return to_json({"rule": rule.label, "why": request_reason(rule, BIG), "condition": rule.wire()})


def refunds(rule: ApprovalRule, *later: str) -> list[Entry]:
    """A refund of 1,500 its rule asked about and alice approved, then the ``later`` ones."""
    statement = Statement("order-7f3a", 1, input_hash(BIG), "approve", WHO)
    approved = signed_row(statement, SIGNER.sign(statement, at=AT), "renée")
    rows = [
        ("refund", "AWAITING_APPROVAL", BIG, request_payload(rule)),
        ("approval-gate", "APPROVED", BIG, approved),
        ("refund", "INTENT", BIG, ""),
        ("refund", "EXECUTED", BIG, '"done"'),
    ]
    for call in later:
        rows += [("refund", "INTENT", call, ""), ("refund", "EXECUTED", call, '"done"')]
    return chain(rows)


@pytest.mark.parametrize(
    ("case", "rows", "named"),
    [
        ("a later call under the rule runs unasked", refunds(RULE, SMALL), []),
        ("a later call over it ran with no approval", refunds(RULE, SMALL, HUGE), [7]),
        ("a later call's amount redacted: cannot be judged", refunds(RULE, HIDDEN), []),
        (
            "a != rule on a redacted value: cannot be judged",
            refunds(ApprovalRule(name="not 500", field="amount", op="!=", value=500), HIDDEN),
            [],
        ),
        (
            "an always-rule gates every call",
            refunds(ApprovalRule(name="a", always=True), SMALL),
            [5],
        ),
        (
            "any_of: the second rule asks",
            refunds(
                ApprovalRule(
                    name="risky",
                    any_of=[RULE, ApprovalRule(field="order_id", op="in", value=["o-2"])],
                ),
                SMALL,
            ),
            [5],
        ),
    ],
)
def test_a_rules_request_binds_its_own_call_and_the_rule_judges_the_rest(
    case: str, rows: list[Entry], named: list[int]
) -> None:
    check, _ = both_verifiers(rows, named)
    assert check.checked == 1  # alice's approval verified


def test_the_request_row_names_the_rule_and_why() -> None:
    assert json.loads(request_payload(RULE)) == {
        "rule": "large refund",
        "why": "rule 'large refund': amount 1500 > 1000",
        "condition": {"name": "large refund", "field": "amount", "op": ">", "value": 1000},
    }
    # the sentence shows no value the journal redacts
    assert request_reason(RULE, BIG, ["/amount"]) == "rule 'large refund': amount (redacted) > 1000"
