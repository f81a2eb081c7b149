"""The rollback prover proves a right undo in every case, and catches wrong ones: an undo that
assumes a result on a failed call, one that is not idempotent, one that restores the wrong
state; an IRREVERSIBLE tool is proven to wait for approval."""

from __future__ import annotations

import pytest

from sagacity.testing import RollbackCase, RollbackNotProven, RollbackProver, SagacityStack
from tests.testing import refunds

ARGS = {"customer_id": "c-1", "amount_cents": 2_500}
UNDO_CASES = [c for c in RollbackCase if c is not RollbackCase.IRREVERSIBLE_WAITS]


@pytest.fixture(autouse=True)
def fresh_world() -> None:
    """No refunds, and the shop's whole balance: a wrong undo leaves the world changed."""
    refunds.LEDGER.clear()
    refunds.BALANCE["cents"] = 10_000


async def test_a_right_undo_is_proven_in_every_case(
    sagacity_prover: RollbackProver, sagacity_stack: SagacityStack
) -> None:
    report = await sagacity_prover.prove_rollback(
        refunds.issue_refund, args=ARGS, probe=refunds.world
    )

    assert [(v.case, v.ok) for v in report.verdicts] == [
        *((case, True) for case in UNDO_CASES),
        (RollbackCase.IRREVERSIBLE_WAITS, None),
    ]
    report.assert_ok()
    assert refunds.LEDGER == {}  # every refund the cases made was reversed
    # each case is a saga the engine journaled: the killed attempt left INTENT alone, the
    # abort journaled it FAILED (effect unknown) and the undo ran from there
    killed = report.verdict(RollbackCase.WORKER_KILLED_AFTER_EFFECT).saga_id
    assert killed is not None
    rows = await sagacity_stack.journal.read(killed)
    assert [(r.tool_name, r.phase.value) for r in rows] == [
        ("issue_refund", "INTENT"),
        ("issue_refund", "FAILED"),
        ("issue_refund", "COMPENSATED"),
    ]
    assert '"effect":"unknown"' in rows[1].payload
    assert (await sagacity_stack.journal.verify(killed)).ok


async def test_an_undo_that_assumes_a_result_is_caught_on_failed_calls(
    sagacity_prover: RollbackProver,
) -> None:
    report = await sagacity_prover.prove_rollback(
        refunds.refund_assuming_result, args=ARGS, probe=refunds.world
    )

    assert report.verdict(RollbackCase.RESTORES_STATE).ok
    assert report.verdict(RollbackCase.UNDO_TWICE).ok
    for case in (
        RollbackCase.FAILED_BEFORE_EFFECT,
        RollbackCase.FAILED_AFTER_EFFECT,
        RollbackCase.WORKER_KILLED_AFTER_EFFECT,
    ):
        verdict = report.verdict(case)
        assert verdict.ok is False
        assert "(ctx.failed, no result), the undo raised TypeError" in verdict.detail
        assert verdict.detail.endswith(": it assumed a result")
    with pytest.raises(RollbackNotProven, match="failed_after_effect: on a call that failed"):
        report.assert_ok()
    # the failed calls' refunds stay live: their undo never ran
    assert len(refunds.LEDGER) == 2


async def test_an_undo_that_is_not_idempotent_is_caught(sagacity_prover: RollbackProver) -> None:
    report = await sagacity_prover.prove_rollback(
        refunds.refund_credited_back,
        args=ARGS,
        probe=refunds.world,
        cases=[RollbackCase.RESTORES_STATE, RollbackCase.UNDO_TWICE],
    )

    assert report.verdict(RollbackCase.RESTORES_STATE).ok
    twice = report.verdict(RollbackCase.UNDO_TWICE)
    assert twice.ok is False
    assert twice.detail == (
        "run twice, the undo left ({}, 12500), not the state before the call ({}, 10000): "
        "its second run is not harmless"
    )


async def test_an_undo_that_restores_the_wrong_state_is_caught(
    sagacity_prover: RollbackProver,
) -> None:
    report = await sagacity_prover.prove_rollback(
        refunds.refund_voided,
        args=ARGS,
        probe=refunds.world,
        cases=[RollbackCase.RESTORES_STATE, RollbackCase.FAILED_BEFORE_EFFECT],
    )

    restored = report.verdict(RollbackCase.RESTORES_STATE)
    assert restored.ok is False
    assert restored.detail.startswith("on a call that succeeded, the undo left ({'rf-prove-")
    assert ": 0}, 7500), not the state before the call ({}, 10000)" in restored.detail
    # nothing to undo after a failure before the effect: the void changes nothing then
    assert report.verdict(RollbackCase.FAILED_BEFORE_EFFECT).ok


async def test_an_irreversible_tool_waits_for_approval(sagacity_prover: RollbackProver) -> None:
    report = await sagacity_prover.prove_rollback(
        refunds.wire_money, args=ARGS, probe=refunds.world
    )

    assert [(v.case, v.ok) for v in report.verdicts] == [
        *((case, None) for case in UNDO_CASES),
        (RollbackCase.IRREVERSIBLE_WAITS, True),
    ]
    assert report.verdict(RollbackCase.RESTORES_STATE).detail == "no undo to prove: IRREVERSIBLE"


async def test_a_probe_that_sees_no_change_proves_nothing(
    sagacity_prover: RollbackProver,
) -> None:
    report = await sagacity_prover.prove_rollback(
        refunds.issue_refund,
        args=ARGS,
        probe=lambda: refunds.BALANCE["cents"] > 0,
        cases=[RollbackCase.RESTORES_STATE],
    )

    (verdict,) = report.verdicts
    assert verdict.ok is False
    assert verdict.detail == (
        "the probe saw no change after the call (True): it must read what the tool changes, "
        "or nothing is proven"
    )
