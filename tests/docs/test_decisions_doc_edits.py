"""docs/decisions.md's approval with changes against the code: its vector's message bytes and
row, and the documented verifier, which must agree with :class:`DecisionCheck` on honest and
swapped edited inputs."""

from __future__ import annotations

import ast
from collections.abc import Callable
from typing import Any

import pytest

from sagacity.evidence.decisions import (
    DecisionCheck,
    Keyring,
    keyring_entry,
    message,
    row_statement,
    signed_row,
)
from sagacity.journal import Entry, to_json
from sagacity.journal.canonical import input_hash
from sagacity.temporal.models import approval_statement, edited_hash
from tests.docs.test_decisions_doc import (
    AT,
    DOC,
    ORDER,
    SIGNER,
    WHO,
    approved_saga,
    blocks,
    chain,
    keyring_json,
    section,
    snippet,
    vars_of,
)

EDITED = {"order_id": "o-18"}
STATEMENT = approval_statement("order-7f3a", 5, input_hash(ORDER), WHO, edited=edited_hash(EDITED))
PAYLOAD = signed_row(
    STATEMENT,
    SIGNER.sign(STATEMENT, at=AT),
    "renée",
    edited=True,
    approved_input_hash=edited_hash(EDITED),
)


def test_the_vector_is_what_the_code_signs_and_journals() -> None:
    text = section("Approve with changes")
    literal = ast.literal_eval(blocks(text, "text")[0].strip())
    assert literal == message(STATEMENT, signed_at=SIGNER.sign(STATEMENT, at=AT).signed_at,
                              key=SIGNER.key_id)  # fmt: skip
    assert blocks(text, "json")[-1].strip() == PAYLOAD
    found = row_statement("order-7f3a", 6, "APPROVED", PAYLOAD)
    assert found is not None and found[0] == STATEMENT
    keyring = Keyring(keys=[keyring_entry("renée", SIGNER.key.public_key(), [WHO])])
    assert keyring.refusal(found[0], found[1]) is None
    # the edited arguments' hash is signed: another one does not verify
    other = PAYLOAD.replace(edited_hash(EDITED), edited_hash({"order_id": "o-19"}))
    forged = row_statement("order-7f3a", 6, "APPROVED", other)
    assert forged is not None and keyring.refusal(forged[0], forged[1]) is not None
    assert snippet()["signature_holds"](
        {"saga_id": "order-7f3a", "seq": 6, "phase": "APPROVED", "payload": PAYLOAD},
        {"keys": [keyring_json()]},
    )
    assert not snippet()["signature_holds"](
        {"saga_id": "order-7f3a", "seq": 6, "phase": "APPROVED", "payload": other},
        {"keys": [keyring_json()]},
    )


def edited_saga(swap: Callable[[int, str], str] = lambda seq, text: text) -> list[Entry]:
    """The approve vector's saga, approved with changes instead: the request at 5 proposes
    o-17, APPROVED at 6 changes it to o-18, which the call at 7-8 runs."""
    rows = [(r.tool_name, r.phase.value, r.input, r.payload) for r in approved_saga()]
    approved = to_json(EDITED)
    rows[5] = ("approval-gate", "APPROVED", approved, PAYLOAD)
    rows[6:8] = [(tool, phase, approved, payload) for tool, phase, _, payload in rows[6:8]]
    return chain([(t, p, swap(seq, i), pay) for seq, (t, p, i, pay) in enumerate(rows, 1)])


def checked(rows: list[Entry]) -> DecisionCheck:
    """:class:`DecisionCheck` fed ``rows``, with the vectors' keyring."""
    check = DecisionCheck(
        "order-7f3a", Keyring(keys=[keyring_entry("renée", SIGNER.key.public_key(), [WHO])])
    )
    for row in rows:
        check.feed(row)
    check.finish()
    return check


def forged_from(first: int) -> Callable[[int, str], str]:
    return lambda seq, text: text.replace("o-18", "o-forged") if seq >= first else text


@pytest.mark.parametrize(
    ("case", "rows", "named"),
    [
        ("honest", edited_saga(), []),
        ("edited input swapped", edited_saga(forged_from(6)), [6]),
        ("only the call swapped", edited_saga(forged_from(7)), [7]),
        (
            "the call ran the proposed input",
            edited_saga(lambda seq, text: ORDER if seq >= 7 else text),
            [7],
        ),
    ],
)
def test_the_documented_verifier_agrees_with_decision_check_on_edits(
    case: str, rows: list[Entry], named: list[int]
) -> None:
    check = checked(rows)
    assert [seq for seq, _ in check.problems] == named, check.problems
    assert check.unverified == []
    plain = [
        {**vars_of(r), "phase": r.phase.value, "timestamp": r.timestamp.isoformat()} for r in rows
    ]
    assert snippet()["unbound"](plain) == named
    if case == "edited input swapped":
        assert check.problems[0][1] == (
            "edited approval seq 6 disagrees: it holds input sha256 "
            f"{input_hash(to_json({'order_id': 'o-forged'}))} but its approver signed "
            f"{edited_hash(EDITED)}"
        )
        assert check.problems[0][1] in DOC.replace("\n", " ")


def test_an_unsigned_row_may_not_change_the_input() -> None:
    """Without a signature nothing proves the change: the row must repeat the request."""
    body: dict[str, Any] = {
        "by": WHO,
        "edited": True,
        "approved_input_hash": edited_hash(EDITED),
    }
    rows = edited_saga()
    rows[5] = chain(
        [(r.tool_name, r.phase.value, r.input, r.payload) for r in rows[:5]]
        + [("approval-gate", "APPROVED", to_json(EDITED), to_json(body))]
    )[5]
    check = checked(rows[:6])
    assert [seq for seq, _ in check.problems] == [6, 6]
    assert "repeats input sha256" in check.problems[0][1]
    assert "carries no signature" in check.problems[1][1]


def test_a_redacted_edited_input_is_a_warning_not_a_failure() -> None:
    marked = to_json({"order_id": {"$redacted": "k1:abcd"}})
    rows = edited_saga(lambda seq, text: marked if seq >= 6 else text)
    check = checked(rows)
    assert check.problems == []
    assert [seq for seq, _ in check.unverified] == [6]
    assert "redacted" in check.unverified[0][1]
