"""Refund tools whose undos are right and wrong in the ways the rollback prover must tell.

The world they change is ``LEDGER`` (refunds made, by id) and ``BALANCE`` (what the shop still
holds), kept in this process: the prover's worker runs in the test's process.
"""

from __future__ import annotations

from typing import Any

from sagacity import CompensationContext, Reversibility, compensable, current_call

#: refunds made and not reversed, by refund id: what the probe reads
LEDGER: dict[str, int] = {}
#: the shop's money, in cents
BALANCE = {"cents": 10_000}


def world() -> tuple[dict[str, int], int]:
    """The probe: every live refund, and the balance."""
    return dict(LEDGER), BALANCE["cents"]


def _refund(amount_cents: int) -> dict[str, Any]:
    call = current_call()
    refund_id = f"rf-{call.saga_id}-{call.seq}"  # derived from the call: found after a failure
    if refund_id not in LEDGER:
        LEDGER[refund_id] = amount_cents
        BALANCE["cents"] -= amount_cents
    return {"refund_id": refund_id}


def _reverse(refund_id: str) -> None:
    amount = LEDGER.pop(refund_id, None)
    if amount is not None:
        BALANCE["cents"] += amount


@compensable(by="claw_back")
def issue_refund(customer_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund a customer (right: its undo finds the refund even after a failed call)."""
    return _refund(amount_cents)


def claw_back(ctx: CompensationContext) -> None:
    refund_id = ctx.result["refund_id"] if not ctx.failed else f"rf-{ctx.saga_id}-{ctx.seq}"
    _reverse(refund_id)


@compensable(by="claw_back_from_result")
def refund_assuming_result(customer_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund a customer (wrong: its undo reads the result, which a failed call has not)."""
    return _refund(amount_cents)


def claw_back_from_result(ctx: CompensationContext) -> None:
    _reverse(ctx.result["refund_id"])


@compensable(by="credit_back")
async def refund_credited_back(customer_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund a customer (wrong: its undo credits the amount back however often it runs)."""
    return _refund(amount_cents)


async def credit_back(ctx: CompensationContext) -> None:
    LEDGER.pop(f"rf-{ctx.saga_id}-{ctx.seq}", None)
    BALANCE["cents"] += ctx.input["amount_cents"]


@compensable(by="void_refund")
def refund_voided(customer_id: str, amount_cents: int) -> dict[str, Any]:
    """Refund a customer (wrong: its undo marks the refund void but keeps the money out)."""
    return _refund(amount_cents)


def void_refund(ctx: CompensationContext) -> None:
    refund_id = f"rf-{ctx.saga_id}-{ctx.seq}"
    if refund_id in LEDGER:
        LEDGER[refund_id] = 0


@compensable(reversibility=Reversibility.IRREVERSIBLE)
def wire_money(customer_id: str, amount_cents: int) -> dict[str, Any]:
    """Wire money out: it cannot be called back, so a human approves each wire."""
    return _refund(amount_cents)
