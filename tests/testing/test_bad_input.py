"""What the prover refuses, before any saga runs: a case it does not know, a tool method with no
instance, a tool the app does not serve."""

from __future__ import annotations

import pytest

from sagacity import CompensationContext, compensable
from sagacity.errors import ToolDeclarationError, UnknownTool
from sagacity.testing import RollbackProver, SagacityStack, serve_apps
from tests.testing import refunds


class Desk:
    @compensable(by="unbook")
    def book(self, seat: str) -> None:
        """Book a seat."""

    def unbook(self, ctx: CompensationContext) -> None:
        """Give the seat back."""


async def test_an_unknown_case_is_refused(sagacity_prover: RollbackProver) -> None:
    with pytest.raises(ValueError, match="'undo_thrice' is not a valid RollbackCase"):
        await sagacity_prover.prove_rollback(
            refunds.issue_refund, args={}, probe=refunds.world, cases=["undo_thrice"]
        )


async def test_a_tool_method_needs_its_instance(sagacity_prover: RollbackProver) -> None:
    with pytest.raises(ToolDeclarationError, match=r"register tools_of\(Desk\(\.\.\.\)\)"):
        await sagacity_prover.prove_rollback(Desk.book, args={"seat": "1A"}, probe=list)


async def test_the_app_names_the_tools_it_serves(sagacity_stack: SagacityStack) -> None:
    async with serve_apps(sagacity_stack, ["tests.embedding.trip"]) as app:
        with pytest.raises(UnknownTool, match="known: book_embedded_flight, charge_embedded_card"):
            app.tool("book_flight")
