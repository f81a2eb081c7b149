"""docs/decisions.md's co-approvals against the code: the vector's keyring, message and row are
what the code signs and journals, and the documented ``co_signed`` agrees with
:class:`DecisionCheck` on honest and tampered co-signatures."""

from __future__ import annotations

import ast
import json
from collections.abc import Callable
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.decisions import (
    DecisionCheck,
    Keyring,
    Signer,
    Statement,
    keyring_entry,
    message,
    payload_object,
    signed_row,
)
from sagacity.journal import Entry, to_json
from sagacity.journal.canonical import input_hash
from sagacity.temporal.models import approval_statement
from tests.docs.test_decisions_doc import (
    AT,
    ORDER,
    SIGNER,
    WHO,
    approved_saga,
    blocks,
    chain,
    section,
    snippet,
    vars_of,
)

HUGO = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32, 64))))
CO = "hugo@example.com"
POLICY = {"group": "finance", "required": 2, "starter_may_approve": False}
REQUEST = to_json({"policy": POLICY, "started_by": "sam@example.com"})
KEYRING = Keyring(
    keys=[
        keyring_entry("renée", SIGNER.key.public_key(), [WHO]),
        keyring_entry("hugo", HUGO.key.public_key(), [CO]),
    ],
    groups={"finance": [WHO, CO]},
)


def co_approval(signer: Signer, who: str, name: str) -> dict[str, Any]:
    statement = approval_statement("order-7f3a", 5, input_hash(ORDER), who)
    return payload_object(signed_row(statement, signer.sign(statement, at=AT), name)) or {}


RENEE, HUGOS = co_approval(SIGNER, WHO, "renée"), co_approval(HUGO, CO, "hugo")
#: as the gate writes it: the completing approval's fields, every co-approval, the quorum
PAYLOAD = to_json({**HUGOS, "approvals": [RENEE, HUGOS], "required": 2})


def test_the_vector_is_what_the_code_signs_and_journals() -> None:
    text = section("Co-approvals (M of N)")
    keyring, request, payload = (json.loads(b) for b in blocks(text, "json"))
    assert keyring == json.loads(KEYRING.model_dump_json())
    assert request == json.loads(REQUEST)
    assert blocks(text, "json")[2].strip() == PAYLOAD and payload["required"] == 2
    statement = approval_statement("order-7f3a", 5, input_hash(ORDER), CO)
    assert ast.literal_eval(blocks(text, "text")[0].strip()) == message(
        statement, signed_at=HUGO.sign(statement, at=AT).signed_at, key=HUGO.key_id
    )
    assert HUGO.key_id in text


def quorum_saga(change: Callable[[list[Any]], list[Any]] = lambda listed: listed) -> list[Entry]:
    """The approve vector's saga, its request under the policy, approved by renée and hugo."""
    rows = [(r.tool_name, r.phase.value, r.input, r.payload) for r in approved_saga()]
    rows[4] = (*rows[4][:3], REQUEST)
    rows[5] = (*rows[5][:3], to_json({**HUGOS, "approvals": change([RENEE, HUGOS]), "required": 2}))
    return chain(rows)


@pytest.mark.parametrize(
    ("case", "rows", "named"),
    [
        ("honest", quorum_saga(), None),
        ("removed", quorum_saga(lambda listed: listed[1:]), "has 1 of the 2 co-signatures"),
        ("duplicated", quorum_saga(lambda listed: [listed[1], listed[1]]), "lists 'hugo"),
        (
            "swapped",
            quorum_saga(lambda listed: [{**listed[0], "by": "sam@example.com"}, listed[1]]),
            "co-approval by 'sam@example.com'",
        ),
    ],
)
def test_the_documented_verifier_agrees_with_decision_check_on_co_approvals(
    case: str, rows: list[Entry], named: str | None
) -> None:
    check = DecisionCheck("order-7f3a", KEYRING)
    for row in rows:
        check.feed(row)
    check.finish()
    plain = [{**vars_of(r), "phase": r.phase.value} for r in rows]
    documented = snippet()["co_signed"](plain, json.loads(KEYRING.model_dump_json()))
    if named is None:
        assert check.problems == [] and documented == [] and check.checked == 3
        return
    assert {seq for seq, _ in check.problems} == {6} and documented == [6], check.problems
    assert any(named in why for _, why in check.problems), check.problems


def test_a_rejection_lists_the_approvals_before_it_and_needs_no_quorum() -> None:
    rows = quorum_saga()
    reject = Statement("order-7f3a", 5, input_hash(ORDER), "reject", CO, "not now")
    payload = to_json(
        {
            **(payload_object(signed_row(reject, HUGO.sign(reject, at=AT), "hugo")) or {}),
            "approvals": [RENEE],
            "required": 2,
        }
    )
    raw = [(r.tool_name, r.phase.value, r.input, r.payload) for r in rows[:5]]
    rejected = chain([*raw, ("approval-gate", "REJECTED", ORDER, payload)])
    check = DecisionCheck("order-7f3a", KEYRING)
    for row in rejected:
        check.feed(row)
    check.finish()
    plain = [{**vars_of(r), "phase": r.phase.value} for r in rejected]
    assert check.problems == [] and check.checked == 2
    assert snippet()["co_signed"](plain, json.loads(KEYRING.model_dump_json())) == []


def test_one_personal_key_is_one_pair_of_eyes_a_service_key_vouches_for_several() -> None:
    """renée's key, trusted for both principals, signs both co-approvals: one person's key
    counts once; the same signatures by a service key ("*") count for two people."""
    both = [WHO, CO]
    renee_as_hugo = co_approval(SIGNER, CO, "renée")
    rows = quorum_saga(lambda listed: [listed[0], renee_as_hugo])
    rows = chain([(r.tool_name, r.phase.value, r.input, r.payload) for r in rows[:5]] + [
        (rows[5].tool_name, "APPROVED", rows[5].input,
         to_json({**renee_as_hugo, "approvals": [RENEE, renee_as_hugo], "required": 2}))
    ])  # fmt: skip
    plain = [{**vars_of(r), "phase": r.phase.value} for r in rows]
    for principals, named in ((both, [6]), (["*"], [])):
        keyring = Keyring(
            keys=[keyring_entry("renée", SIGNER.key.public_key(), principals)],
            groups={"finance": both},
        )
        check = DecisionCheck("order-7f3a", keyring)
        for row in rows:
            check.feed(row)
        check.finish()
        assert [seq for seq, _ in check.problems] == named, check.problems
        assert snippet()["co_signed"](plain, json.loads(keyring.model_dump_json())) == named
        if named:
            assert "two co-signatures by the one key" in check.problems[0][1]
