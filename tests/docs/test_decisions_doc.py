"""docs/decisions.md against the code: its vectors, their message bytes and rows, and its
verifier snippet, which must agree with :class:`DecisionCheck` on honest and edited rows."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.decisions import (
    DecisionCheck,
    Keyring,
    Signer,
    Statement,
    halt_statement,
    keyring_entry,
    message,
    row_statement,
    signed_row,
)
from sagacity.journal import GENESIS_HASH, Entry, Phase, entry_hash, to_json
from sagacity.journal.canonical import input_hash

DOC = (Path(__file__).resolve().parents[2] / "docs" / "decisions.md").read_text(encoding="utf-8")
SEED = bytes(range(32))
SIGNER = Signer(Ed25519PrivateKey.from_private_bytes(SEED))
AT = datetime(2026, 1, 2, 3, 4, 5, 123456, tzinfo=UTC)
WHO = "renée@example.com"
ORDER = '{"order_id":"o-17"}'
SCOPE = {"sagas": ["order-7f3a"]}
INTENT_HASH = "c8d45f77112e05b219bd041d4aff1b083118212d78b2d5fa44e5712c5b634573"


@dataclass(frozen=True)
class Vector:
    statement: Statement
    seq: int  # the row's
    phase: str
    tool: str
    extra: dict[str, Any]


VECTORS = {
    "Approve": Vector(
        Statement("order-7f3a", 5, input_hash(ORDER), "approve", WHO),
        6,
        "APPROVED",
        "approval-gate",
        {},
    ),
    "Reject": Vector(
        Statement(
            "order-7f3a",
            5,
            input_hash(ORDER),
            "reject",
            WHO,
            "wrong address",
            "Ship it to the billing address: call update_address first.",
        ),
        6,
        "REJECTED",
        "approval-gate",
        {},
    ),
    "Abort": Vector(
        Statement("order-7f3a", 0, "", "abort", WHO, "customer called"),
        6,
        "REJECTED",
        "approval-gate",
        {"abort": True},
    ),
    "Halt": Vector(
        halt_statement(
            kind="halt", policy="compensate", scope=SCOPE, operator=WHO, reason="bad prices"
        ),
        6,
        "REJECTED",
        "approval-gate",
        {"abort": True, "halt": {"id": 3, "kind": "halt", "policy": "compensate", "scope": SCOPE}},
    ),
    "Resolve": Vector(
        Statement(
            "order-7f3a", 3, INTENT_HASH, "happened", WHO, result=to_json({"order_id": "o-17"})
        ),
        4,
        "EXECUTED",
        "create_order",
        {"$resolution": True, "resolved_by": WHO, "result": {"order_id": "o-17"}},
    ),
}


def section(title: str) -> str:
    return DOC.split(f"\n### {title}\n", 1)[1].split("\n#", 1)[0]


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.DOTALL)


def keyring_json() -> dict[str, Any]:
    entry: dict[str, Any] = json.loads(blocks(DOC.split("## Test vectors")[1], "json")[0])
    return entry


@pytest.mark.parametrize("title", list(VECTORS))
def test_each_vector_is_what_the_code_signs_and_journals(title: str) -> None:
    vector = VECTORS[title]
    signature = SIGNER.sign(vector.statement, at=AT)
    entry = keyring_entry("renée", SIGNER.key.public_key(), [WHO])
    assert keyring_json() == entry.model_dump() and SIGNER.key_id in DOC
    text = section(title)
    literal = ast.literal_eval(blocks(text, "text")[0].strip())
    assert literal == message(vector.statement, signed_at=signature.signed_at, key=SIGNER.key_id)
    documented_row = blocks(text, "json")[-1].strip()
    assert documented_row == signed_row(vector.statement, signature, "renée", **vector.extra)
    found = row_statement(
        "order-7f3a", vector.seq, vector.phase, documented_row, tool_name=vector.tool
    )
    assert found is not None and found[0] == vector.statement
    assert Keyring(keys=[entry]).refusal(found[0], found[1]) is None


def snippet() -> dict[str, Any]:
    code = next(b for b in blocks(DOC, "python") if "def unbound" in b)
    space: dict[str, Any] = {}
    exec(compile(code, "docs/decisions.md", "exec"), space)
    return space


def chain(rows: list[tuple[str, str, str, str]]) -> list[Entry]:
    """Rows of saga ``order-7f3a`` from (tool, phase, input, payload), hashed by the rules."""
    out: list[Entry] = []
    prev = GENESIS_HASH
    for seq, (tool, phase, input_, payload) in enumerate(rows, start=1):
        stamp = datetime(2026, 1, 2, 3, 4, seq, tzinfo=UTC)
        row = Entry("order-7f3a", seq, tool, Phase(phase), input_, payload, stamp, "")
        prev = entry_hash(prev, row)
        out.append(dataclasses.replace(row, hash=prev))
    return out


def approved_saga(edit: Callable[[int, str], str] = lambda seq, text: text) -> list[Entry]:
    """The approve vector's saga: two calls, the request at 5, APPROVED at 6, the call at 7-8."""
    approved = signed_row(VECTORS["Approve"].statement, SIGNER.sign(
        VECTORS["Approve"].statement, at=AT), "renée")  # fmt: skip
    return chain(
        [
            ("reserve", "INTENT", "{}", ""),
            ("reserve", "EXECUTED", "{}", "{}"),
            ("create_order", "INTENT", "{}", ""),
            ("create_order", "EXECUTED", "{}", ORDER),
            ("send_confirmation", "AWAITING_APPROVAL", edit(5, ORDER), ""),
            ("approval-gate", "APPROVED", edit(6, ORDER), approved),
            ("send_confirmation", "INTENT", edit(7, ORDER), ""),
            ("send_confirmation", "EXECUTED", edit(8, ORDER), "{}"),
        ]
    )


def forged_from(first: int) -> Callable[[int, str], str]:
    return lambda seq, text: text.replace("o-17", "o-forged") if seq >= first else text


@pytest.mark.parametrize(
    ("case", "rows", "named"),
    [
        ("honest", approved_saga(), []),
        ("approved input edited", approved_saga(forged_from(6)), [6, 7]),
        ("request edited too", approved_saga(forged_from(5)), [6]),
        ("only the call edited", approved_saga(forged_from(7)), [7]),
    ],
)
def test_the_documented_verifier_agrees_with_decision_check(
    case: str, rows: list[Entry], named: list[int]
) -> None:
    check, plain = both_verifiers(rows, named)
    space = snippet()
    assert space["signature_holds"](plain[5], {"keys": [keyring_json()]})
    if case == "request edited too":
        assert check.problems[0][1] == (
            "decision seq 6 disagrees: signed over input sha256 "
            "7c9c5842af9980e9e39aab1422cdd1c78200ea0c90495983e49bbfa7d06fa032 but the request at "
            "seq 5 holds 4851a38b5e36b8edf78bf0d57eecd268b55cc57f9cd9bef0679b7ecf2129897d"
        )
        assert check.problems[0][1] in DOC.replace("\n", " ")


def both_verifiers(
    rows: list[Entry], named: list[int]
) -> tuple[DecisionCheck, list[dict[str, Any]]]:
    """Check that :class:`DecisionCheck` and the doc's ``unbound`` both name the rows ``named``;
    the check, and the rows as the snippet reads them."""
    keyring = Keyring(keys=[keyring_entry("renée", SIGNER.key.public_key(), [WHO])])
    check = DecisionCheck("order-7f3a", keyring)
    for row in rows:
        check.feed(row)
    check.finish()
    assert [seq for seq, _ in check.problems] == named, check.problems
    plain = [
        {**vars_of(r), "phase": r.phase.value, "timestamp": r.timestamp.isoformat()} for r in rows
    ]
    assert snippet()["unbound"](plain) == named
    return check, plain


def vars_of(row: Entry) -> dict[str, Any]:
    return {
        "saga_id": row.saga_id,
        "seq": row.seq,
        "tool_name": row.tool_name,
        "input": row.input,
        "payload": row.payload,
        "hash": row.hash,
    }


@pytest.mark.parametrize("title", list(VECTORS))
def test_the_documented_verifier_accepts_each_vector_and_refuses_an_edited_principal(
    title: str,
) -> None:
    holds = snippet()["signature_holds"]
    keyring = {"keys": [keyring_json()]}
    vector = VECTORS[title]
    row: dict[str, Any] = {
        "saga_id": "order-7f3a",
        "seq": vector.seq,
        "phase": vector.phase,
        "payload": blocks(section(title), "json")[-1].strip(),
    }
    assert holds(row, keyring)
    edited = row["payload"].replace(f'"by":"{WHO}"', '"by":"mallory@example.com"')
    assert not holds({**row, "payload": edited}, keyring)
    assert not holds({**row, "saga_id": "order-0000"}, keyring)
    if title != "Abort" and title != "Halt":
        assert not holds({**row, "seq": vector.seq + 1}, keyring)
