"""Every shape of a journaled call result, read by the one reader: the real result, or why not."""

from __future__ import annotations

import json

import pytest

from sagacity.journal import read_result
from sagacity.journal.results import read_input, resolution_payload

THING = {"thing_id": "T-42"}
LOOKALIKE = {"resolved_by": "alice", "result": 1, "more": 2}
SIGNED = {
    "by": "alice",
    "decision": "resolve",
    "input_hash": "ab" * 32,
    "reason": "",
    "signer": "alice",
    "key_id": "k1",
    "signed_at": "2026-01-01T00:00:00Z",
    "signature": "c2ln",
}


@pytest.mark.parametrize(
    ("payload", "value", "resolved_by"),
    [
        (json.dumps(THING), THING, None),
        ("null", None, None),
        ("", None, None),
        (json.dumps([1, "two"]), [1, "two"], None),
        (resolution_payload("alice", THING), THING, "alice"),
        (json.dumps({"resolved_by": "alice", "result": THING, **SIGNED}), THING, "alice"),
        # the unsigned shape without the reserved key: a tool's own result (or a resolution
        # written before the key existed, which the row cannot tell apart)
        (
            json.dumps({"resolved_by": "alice", "result": THING}),
            {"resolved_by": "alice", "result": THING},
            None,
        ),
        # a tool's own result that only looks a little like a resolution is the tool's
        (json.dumps(LOOKALIKE), LOOKALIKE, None),
    ],
)
def test_a_real_result_is_read_as_the_tool_or_the_resolver_gave_it(
    payload: str, value: object, resolved_by: str | None
) -> None:
    read = read_result(payload)
    assert read.available
    assert (read.value, read.resolved_by) == (value, resolved_by)


@pytest.mark.parametrize(
    ("payload", "why"),
    [
        (json.dumps({"a": {"api_token": {"$redacted": "hmac:k:ff"}}}), "result/a/api_token"),
        (
            json.dumps({"resolved_by": "alice", "result": {"token": {"$redacted": "removed"}}}),
            "result/token",
        ),
        (json.dumps({"$redacted": "removed"}), "hides result,"),
        (json.dumps({"unserializable_result": "set", "error": "x"}), "returned a set"),
        (json.dumps({"unjournalable_result": "NUL byte"}), "database refused"),
        ("{not json", "not JSON"),
    ],
)
def test_a_result_the_journal_does_not_hold_is_not_available(payload: str, why: str) -> None:
    read = read_result(payload)
    assert not read.available and read.value is None
    assert read.missing is not None and why in read.missing


def test_the_worker_s_own_outcome_is_not_taken_for_redacted() -> None:
    # a marker in what the tool really returned is its data, not redaction
    payload = json.dumps({"$redacted": "the tool's own"})
    assert read_result(payload, journaled=False).value == {"$redacted": "the tool's own"}
    # but a resolution's envelope is still unwrapped
    assert read_result(resolution_payload("bob", 7), journaled=False).value == 7


def test_a_redacted_input_is_not_the_real_one() -> None:
    assert read_input('{"amount": 5}').value == {"amount": 5}
    assert read_input("").value == {}
    read = read_input('{"amount": 5, "api_token": {"$redacted": "removed"}}')
    assert read.missing is not None and "input/api_token" in read.missing


def test_a_replay_from_before_the_reserved_key_reads_the_unsigned_shape_as_it_did() -> None:
    # workflows recorded before "$resolution" took this row for a resolution; their replay must
    old = json.dumps({"resolved_by": "alice", "result": THING})
    assert (read_result(old, legacy=True).value, read_result(old).value) == (
        THING,
        json.loads(old),
    )
