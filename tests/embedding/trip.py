"""A travel app of a user's own, for the embedding tests: two tools and a workflow of its own."""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from sagacity import CompensableTool, CompensationContext, compensable

with workflow.unsafe.imports_passed_through():
    from sagacity.temporal.models import SagaResult
    from sagacity.temporal.saga import Saga

#: flights booked and not cancelled, by booking id (the "world" the tools change)
BOOKED: dict[str, str] = {}


class CardDeclined(RuntimeError):
    """The bank said no: nothing was charged."""


@compensable(by="cancel_embedded_flight")
def book_embedded_flight(traveler: str, flight: str) -> dict[str, Any]:
    booking = f"{flight}-{traveler}"
    BOOKED[booking] = traveler
    return {"booking": booking}


def cancel_embedded_flight(ctx: CompensationContext) -> None:
    """Cancel the booking, found from the call's own input when the call failed (no result)."""
    booking = (
        f"{ctx.input['flight']}-{ctx.input['traveler']}" if ctx.failed else ctx.result["booking"]
    )
    BOOKED.pop(booking, None)


@compensable(by="refund_embedded_card", no_effect_on=(CardDeclined,))
def charge_embedded_card(traveler: str, cents: int) -> None:
    raise CardDeclined(f"card of {traveler} declined for {cents} cents")


def refund_embedded_card(ctx: CompensationContext) -> None:
    """Never needed: a declined charge leaves nothing to refund."""


TOOLS: list[CompensableTool[..., Any]] = [book_embedded_flight, charge_embedded_card]


@workflow.defn(name="tests.embedding.BookTrip")
class BookTrip:
    """Book the flight, then charge the card; a declined card undoes the flight."""

    @workflow.run
    async def run(self, traveler: str) -> SagaResult:
        saga = Saga()

        async def trip() -> None:
            await saga.call("book_embedded_flight", traveler=traveler, flight="LH400")
            await saga.call("charge_embedded_card", traveler=traveler, cents=120_00)

        return await saga.run(trip)


@workflow.defn(name="tests.embedding.TripOnCue")
class TripOnCue:
    """A saga that waits for its cue (a signal) before its first call."""

    def __init__(self) -> None:
        self._cued = False

    @workflow.run
    async def run(self, traveler: str) -> SagaResult:
        saga = Saga()
        await workflow.wait_condition(lambda: self._cued)

        async def trip() -> None:
            await saga.call("book_embedded_flight", traveler=traveler, flight="LH400")

        return await saga.run(trip)

    @workflow.signal
    def cue(self) -> None:
        self._cued = True
