"""DecisionCheck on journals written by hand: the shapes a live run rarely makes (a second
decision, a decision with no request, a halt's row, resolutions) each named, and honest ones not."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from sagacity.evidence.decisions import (
    DecisionCheck,
    Keyring,
    Signer,
    Statement,
    halt_statement,
    keyring_entry,
    signed_row,
)
from sagacity.journal import GENESIS_HASH, Entry, Phase, entry_hash, input_hash, to_json

SAGA = "order-1"
ALICE = Signer(Ed25519PrivateKey.from_private_bytes(bytes(range(32))))
KEYRING = Keyring(keys=[keyring_entry("alice", ALICE.key.public_key(), ["alice"])])
ORDER = '{"order_id":"o-17"}'
Row = tuple[str, str, str, str]


def chain(rows: list[Row]) -> list[Entry]:
    out: list[Entry] = []
    prev = GENESIS_HASH
    for seq, (tool, phase, input_, payload) in enumerate(rows, start=1):
        stamp = datetime(2026, 1, 2, 3, 4, seq, tzinfo=UTC)
        row = Entry(SAGA, seq, tool, Phase(phase), input_, payload, stamp, "")
        prev = entry_hash(prev, row)
        out.append(dataclasses.replace(row, hash=prev))
    return out


def checked(rows: list[Row]) -> DecisionCheck:
    check = DecisionCheck(SAGA, KEYRING)
    for entry in chain(rows):
        check.feed(entry)
    check.finish()
    return check


def signed(statement: Statement, **extra: object) -> str:
    return signed_row(statement, ALICE.sign(statement), "alice", **extra)


def approval(seq: int = 1) -> str:
    return signed(Statement(SAGA, seq, input_hash(ORDER), "approve", "alice"))


REQUEST: Row = ("send", "AWAITING_APPROVAL", ORDER, "")
ABORT = Statement(SAGA, 0, "", "abort", "alice", "stop")


def test_an_honest_approval_and_a_late_abort_pass() -> None:
    check = checked(
        [
            REQUEST,
            ("approval-gate", "APPROVED", ORDER, approval()),
            ("send", "INTENT", ORDER, ""),
            ("send", "EXECUTED", ORDER, "{}"),
            REQUEST,
            ("approval-gate", "APPROVED", ORDER, approval(5)),
            ("approval-gate", "REJECTED", ORDER, signed(ABORT, abort=True)),
        ]
    )
    assert (check.problems, check.unverified, check.checked) == ([], [], 3)


@pytest.mark.parametrize(
    ("rows", "seq", "says"),
    [
        (
            [("approval-gate", "APPROVED", ORDER, approval(0))],
            1,
            "decides no request: no AWAITING_APPROVAL row comes before it",
        ),
        (
            [REQUEST, ("t", "INTENT", "{}", ""), ("approval-gate", "APPROVED", ORDER, approval())],
            3,
            "decides no request: the newest request is at seq 1",
        ),
        (
            [
                REQUEST,
                ("approval-gate", "REJECTED", ORDER, '{"by":"sagacity","reason":"timeout"}'),
                ("approval-gate", "APPROVED", ORDER, approval()),
            ],
            3,
            "second decision for the request at seq 1, decided at seq 2",
        ),
        (
            [("send", "INTENT", ORDER, ""), REQUEST],
            1,
            "INTENT seq 1 of 'send' has no APPROVED before it",
        ),
        (
            [
                REQUEST,
                ("approval-gate", "APPROVED", ORDER, approval()),
                ("other", "INTENT", ORDER, ""),
            ],
            3,
            "INTENT seq 3 runs 'other', but the APPROVED row at seq 2 approved 'send'",
        ),
        (
            [REQUEST, ("approval-gate", "APPROVED", ORDER, "approver=alice")],
            2,
            "APPROVED row carries no signature",
        ),
    ],
)
def test_each_unbound_decision_is_named(rows: list[Row], seq: int, says: str) -> None:
    problems = checked(rows).problems
    assert [s for s, _ in problems] == [seq] and says in problems[0][1], problems


def halt_row(scope: dict[str, object]) -> str:
    statement = halt_statement(
        kind="halt", policy="compensate", scope=scope, operator="alice", reason="bad prices"
    )
    record = {"id": 3, "kind": "halt", "policy": "compensate", "scope": scope}
    return signed(statement, abort=True, halt=record)


def test_a_halt_row_verifies_only_for_a_saga_its_scope_takes_in() -> None:
    gate = ("approval-gate", "REJECTED", ORDER)
    ok = checked([REQUEST, (*gate, halt_row({"sagas": [SAGA]}))])
    assert (ok.problems, ok.checked) == ([], 1)
    elsewhere = checked([REQUEST, (*gate, halt_row({"sagas": ["order-2"]}))])
    assert "scope leaves out this saga" in elsewhere.problems[0][1]
    edited = halt_row({"sagas": [SAGA]}).replace('"policy":"compensate"', '"policy":"keep"', 1)
    damaged = checked([REQUEST, (*gate, edited)])
    assert "input_hash is not the SHA-256 of the halt" in damaged.problems[0][1]


def test_unsigned_aborts_are_unverified_and_unsigned_human_resolutions_fail() -> None:
    check = checked(
        [
            REQUEST,
            (
                "approval-gate",
                "REJECTED",
                ORDER,
                '{"abort":true,"by":"unverified:bob","reason":"x"}',
            ),
            ("t", "INTENT", "{}", ""),
            ("t", "EXECUTED", "{}", '{"resolved_by":"bob","result":1}'),
            ("u", "INTENT", "{}", ""),
            ("u", "EXECUTED", "{}", '{"resolved_by":"bob","result":1,"other":2}'),  # a tool's
        ]
    )
    assert [s for s, _ in check.unverified] == [2]
    assert [s for s, _ in check.problems] == [4]
    assert "resolves the SUSPECT call at seq 3 unsigned" in check.problems[0][1]


def test_a_resolution_is_bound_to_its_intent_and_a_redacted_result_is_unverified() -> None:
    intent = chain([("t", "INTENT", "{}", "")])[0]

    def resolved(result: object, intent_hash: str = intent.hash) -> Row:
        statement = Statement(SAGA, 1, intent_hash, "happened", "alice", result=to_json(result))
        return ("t", "EXECUTED", "{}", signed(statement, resolved_by="alice", result=result))

    assert checked([("t", "INTENT", "{}", ""), resolved({"id": 1})]).checked == 1
    wrong = checked([("t", "INTENT", "{}", ""), resolved({"id": 1}, "0" * 64)])
    assert "signed over INTENT hash 000" in wrong.problems[0][1]
    hidden = checked([("t", "INTENT", "{}", ""), resolved({"token": {"$redacted": "removed"}})])
    assert hidden.problems == [] and "redacted" in hidden.unverified[0][1]
