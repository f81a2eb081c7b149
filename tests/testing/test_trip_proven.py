"""The embedding tests' travel app, written from the docs of an earlier release, proven: its
flight's undo once read ``ctx.result`` on a failed call, which wedged the saga's failure path;
the prover is what catches that before production, and the fixed undo passes every case."""

from __future__ import annotations

from sagacity.testing import RollbackCase, RollbackProver
from tests.embedding import trip

ARGS = {"traveler": "ada", "flight": "LH-400"}


async def world() -> dict[str, str]:
    """The probe: the flights booked and not cancelled."""
    return dict(trip.BOOKED)


async def test_the_flight_undo_copes_with_a_failed_call_in_every_case(
    sagacity_prover: RollbackProver,
) -> None:
    trip.BOOKED.clear()
    report = await sagacity_prover.prove_rollback(trip.book_embedded_flight, args=ARGS, probe=world)

    report.assert_ok()
    assert [v.case for v in report.verdicts if v.ok] == [
        c for c in RollbackCase if c is not RollbackCase.IRREVERSIBLE_WAITS
    ]
    assert trip.BOOKED == {}
