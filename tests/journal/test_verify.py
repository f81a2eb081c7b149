"""The pure chain verifier: the first bad row, why, and how far the chain held."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from sagacity.journal import (
    GENESIS_HASH,
    ChainVerifier,
    Dangling,
    Draft,
    Entry,
    Fault,
    Phase,
    seal,
    verify_rows,
)

T0 = datetime(2026, 5, 6, 7, 8, 9, 123456, tzinfo=UTC)


def chain(saga_id: str = "s", rows: int = 5) -> list[Entry]:
    entries: list[Entry] = []
    prev = GENESIS_HASH
    for seq in range(1, rows + 1):
        draft = Draft(saga_id, "ship", Phase.INTENT, f'{{"box": {seq}}}')
        entries.append(seal(draft, seq=seq, prev_hash=prev, timestamp=T0 + timedelta(seconds=seq)))
        prev = entries[-1].hash
    return entries


def test_intact_chain_verifies() -> None:
    rows = chain()
    verdict = verify_rows("s", rows)
    assert (verdict.ok, verdict.rows, verdict.head_seq, verdict.head_hash) == (
        True,
        5,
        5,
        rows[-1].hash,
    )


def test_empty_saga_verifies_at_genesis() -> None:
    verdict = verify_rows("s", [])
    assert (verdict.ok, verdict.rows, verdict.head_seq, verdict.head_hash) == (
        True,
        0,
        0,
        GENESIS_HASH,
    )


def edit(rows: list[Entry], index: int, **changes: object) -> list[Entry]:
    edited = list(rows)
    edited[index] = replace(rows[index], **changes)  # type: ignore[arg-type]
    return edited


R = chain()


@pytest.mark.parametrize(
    ("rows", "fault", "seq", "head_seq"),
    [
        pytest.param(R[1:], Fault.WRONG_GENESIS, 2, 0, id="first row missing"),
        pytest.param(R[:2] + R[3:], Fault.GAP, 4, 2, id="middle row missing"),
        pytest.param(R[:3] + R[2:], Fault.DUPLICATE, 3, 3, id="row repeated"),
        pytest.param(R[:3] + R[1:2], Fault.OUT_OF_ORDER, 2, 3, id="seq goes back"),
        pytest.param(edit(R, 2, input='{"box": 99}'), Fault.HASH_MISMATCH, 3, 2, id="input"),
        pytest.param(edit(R, 2, payload="x"), Fault.HASH_MISMATCH, 3, 2, id="payload"),
        pytest.param(edit(R, 0, phase=Phase.FAILED), Fault.HASH_MISMATCH, 1, 0, id="phase"),
        pytest.param(edit(R, 4, tool_name="burn"), Fault.HASH_MISMATCH, 5, 4, id="tool name"),
        pytest.param(
            edit(R, 1, timestamp=R[1].timestamp + timedelta(microseconds=1)),
            Fault.HASH_MISMATCH,
            2,
            1,
            id="timestamp",
        ),
        pytest.param(edit(R, 3, hash="0" * 64), Fault.HASH_MISMATCH, 4, 3, id="hash"),
        pytest.param([R[0], R[2], R[1]], Fault.GAP, 3, 1, id="rows reordered"),
        pytest.param(R[:2] + chain("other")[2:], Fault.WRONG_SAGA, 3, 2, id="other saga"),
    ],
)
def test_first_bad_row_is_named(rows: list[Entry], fault: Fault, seq: int, head_seq: int) -> None:
    verdict = verify_rows("s", rows)
    assert verdict.problem is not None
    assert (verdict.problem.fault, verdict.problem.seq, verdict.head_seq) == (fault, seq, head_seq)
    assert verdict.head_hash == (R[head_seq - 1].hash if head_seq else GENESIS_HASH)


def test_verifier_ignores_rows_after_the_first_problem() -> None:
    verifier = ChainVerifier("s")
    problems = [verifier.feed(row) for row in R[:2] + R[3:]]
    assert problems[:2] == [None, None]
    assert problems[2] is not None and problems[2:] == [problems[2]] * 2  # the same first problem
    verdict = verifier.verdict()
    assert (verdict.rows, verdict.head_seq, verdict.problem) == (3, 2, problems[2])


def test_swapped_contents_do_not_hash() -> None:
    # swapping two rows' contents but not their seqs keeps the order: only the hashes betray it
    swapped = [*R[:1], replace(R[3], seq=2), R[2], replace(R[1], seq=4), R[4]]
    verdict = verify_rows("s", swapped)
    assert verdict.problem is not None
    assert (verdict.problem.fault, verdict.problem.seq) == (Fault.HASH_MISMATCH, 2)


def sealed(*phases: tuple[str, Phase]) -> list[Entry]:
    entries: list[Entry] = []
    prev = GENESIS_HASH
    for seq, (tool, phase) in enumerate(phases, 1):
        draft = Draft("s", tool, phase, "{}")
        entries.append(seal(draft, seq=seq, prev_hash=prev, timestamp=T0 + timedelta(seconds=seq)))
        prev = entries[-1].hash
    return entries


def test_an_intent_no_outcome_follows_is_dangling_not_a_fault() -> None:
    rows = sealed(
        ("reserve", Phase.INTENT),
        ("reserve", Phase.EXECUTED),
        ("order", Phase.INTENT),  # the worker died: no outcome, then a compensation ran
        ("reserve", Phase.COMPENSATED),
        ("email", Phase.INTENT),
        ("email", Phase.FAILED),
        ("refund", Phase.INTENT),  # the last row: still running, or SUSPECT
    )
    verdict = verify_rows("s", rows)
    assert verdict.ok and verdict.rows == 7
    assert verdict.dangling == (Dangling(3, "order"), Dangling(7, "refund"))
    assert verify_rows("s", rows[:6]).dangling == (Dangling(3, "order"),)
    assert verify_rows("s", rows[:2]).dangling == ()


def test_an_intent_before_a_broken_row_is_not_called_dangling() -> None:
    rows = sealed(
        ("a", Phase.INTENT), ("a", Phase.EXECUTED), ("b", Phase.INTENT), ("b", Phase.EXECUTED)
    )
    broken = [*rows[:3], replace(rows[3], payload="edited")]
    verdict = verify_rows("s", broken)
    assert not verdict.ok and verdict.problem is not None and verdict.problem.seq == 4
    assert verdict.dangling == ()
