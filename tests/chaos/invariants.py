"""What must hold after chaos, checked against the journal and the shop's own tables.

Each check returns the violations it found, as sentences naming the saga; none means it held.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field

import psycopg
from psycopg.rows import TupleRow

from sagacity.journal import APPROVAL_GATE, Entry, Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import TERMINAL_STATES, SagaState
from tests.chaos.harness import Outcome

COMPENSABLE = ("reserve_inventory", "create_order")
IRREVERSIBLE = "send_confirmation"


@dataclass
class ShopRows:
    """What the shop's tables hold for one saga."""

    #: (product, quantity, status) per reservation
    reservations: list[tuple[str, int, str]] = field(default_factory=list)
    #: status per order
    orders: list[str] = field(default_factory=list)
    #: confirmations sent
    outbox: int = 0


async def shop_rows(conn: psycopg.AsyncConnection[TupleRow]) -> dict[str, ShopRows]:
    rows: dict[str, ShopRows] = {}

    def of(saga_id: str) -> ShopRows:
        return rows.setdefault(saga_id, ShopRows())

    for saga_id, product, quantity, status in await (
        await conn.execute("SELECT saga_id, product_id, quantity, status FROM reservations")
    ).fetchall():
        of(saga_id).reservations.append((product, quantity, status))
    for saga_id, status in await (
        await conn.execute("SELECT saga_id, status FROM orders")
    ).fetchall():
        of(saga_id).orders.append(status)
    for saga_id, count in await (
        await conn.execute("SELECT saga_id, count(*) FROM outbox GROUP BY saga_id")
    ).fetchall():
        of(saga_id).outbox = count
    return rows


def _unknown_effects(rows: list[Entry]) -> Counter[str]:
    """FAILED calls whose effect is unknown (a crash or a cut connection mid-call), by tool: the
    runtime compensates them like EXECUTED ones, the compensation coping with no effect."""
    unknown: Counter[str] = Counter()
    for row in rows:
        if row.phase is Phase.FAILED:
            try:
                body = json.loads(row.payload) if row.payload else {}
            except ValueError:
                body = {}
            if not isinstance(body, dict) or body.get("effect", "unknown") != "none":
                unknown[row.tool_name] += 1
    return unknown


def journal_violations(saga_id: str, rows: list[Entry], state: SagaState) -> list[str]:
    """Duplicates, calls without an outcome, effects neither compensated nor flagged."""
    found = []
    counts = Counter((r.tool_name, r.phase) for r in rows)
    unknown = _unknown_effects(rows)
    for (tool, phase), n in counts.items():
        if n > 1:
            found.append(f"{saga_id}: {n} {phase.value} rows for {tool}")
    for tool in (*COMPENSABLE, IRREVERSIBLE):
        intents = counts[(tool, Phase.INTENT)]
        outcomes = counts[(tool, Phase.EXECUTED)] + counts[(tool, Phase.FAILED)]
        if intents != outcomes:
            found.append(f"{saga_id}: {tool} has {intents} INTENT but {outcomes} outcome rows")
    decisions = counts[(APPROVAL_GATE, Phase.APPROVED)] + counts[(APPROVAL_GATE, Phase.REJECTED)]
    if decisions > counts[(IRREVERSIBLE, Phase.AWAITING_APPROVAL)]:
        found.append(f"{saga_id}: {decisions} decisions for fewer approval requests")
    if counts[(IRREVERSIBLE, Phase.INTENT)] > counts[(APPROVAL_GATE, Phase.APPROVED)]:
        found.append(f"{saga_id}: {IRREVERSIBLE} ran without an approval")
    for tool in COMPENSABLE:
        took = counts[(tool, Phase.EXECUTED)] + unknown[tool]
        undone = counts[(tool, Phase.COMPENSATED)] + counts[(tool, Phase.COMPENSATION_FAILED)]
        if state is SagaState.COMPLETED and undone:
            found.append(f"{saga_id}: completed, yet {tool} was compensated")
        if state is not SagaState.COMPLETED and took != undone:
            found.append(
                f"{saga_id}: ended {state.value} with {took} EXECUTED (or FAILED, effect "
                f"unknown) {tool} but {undone} COMPENSATED/COMPENSATION_FAILED"
            )
    if state is SagaState.COMPLETED and counts[(IRREVERSIBLE, Phase.EXECUTED)] != 1:
        found.append(f"{saga_id}: completed without an EXECUTED {IRREVERSIBLE}")
    return found


def shop_violations(saga_id: str, rows: list[Entry], state: SagaState, shop: ShopRows) -> list[str]:
    """The shop's tables say what the journal says: every effect journaled, undone when undone.

    A call FAILED with its effect unknown may or may not have left its row.
    """
    found = []
    executed = Counter(r.tool_name for r in rows if r.phase is Phase.EXECUTED)
    unknown = _unknown_effects(rows)
    compensated = Counter(r.tool_name for r in rows if r.phase is Phase.COMPENSATED)
    for tool, made, what in (
        ("reserve_inventory", len(shop.reservations), "reservations"),
        ("create_order", len(shop.orders), "orders"),
        (IRREVERSIBLE, shop.outbox, "confirmations sent"),
    ):
        if not executed[tool] <= made <= executed[tool] + unknown[tool]:
            found.append(
                f"{saga_id}: {made} {what}, {executed[tool]} EXECUTED {tool} "
                f"({unknown[tool]} FAILED with the effect unknown)"
                + (
                    " (an approved irreversible call must run at most once)"
                    if tool == IRREVERSIBLE
                    else ""
                )
            )
    held = [r for r in shop.reservations if r[2] == "held"]
    placed = [s for s in shop.orders if s == "placed"]
    if compensated["reserve_inventory"] and held:
        found.append(f"{saga_id}: reservation compensated in the journal, still held in the shop")
    if compensated["create_order"] and placed:
        found.append(f"{saga_id}: order compensated in the journal, still placed in the shop")
    if state is SagaState.COMPLETED and (len(held) != 1 or len(placed) != 1):
        found.append(
            f"{saga_id}: completed with {len(held)} held reservations, {len(placed)} orders"
        )
    return found


async def check(
    database_url: str,
    outcomes: list[Outcome],
    stock_before: dict[str, int],
) -> list[str]:
    """Every invariant over every saga the driver ran; returns the violations."""
    found: list[str] = []
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        shop = await shop_rows(conn)
        stock_after: dict[str, int] = dict(
            await (await conn.execute("SELECT product_id, available FROM inventory")).fetchall()
        )
        stale = await (
            await conn.execute("SELECT saga_id, journal_seq FROM sagacity_approval_request")
        ).fetchall()
    sold: Counter[str] = Counter()
    async with await JournalStore.open(database_url) as journal:
        for outcome in outcomes:
            sid = outcome.plan.saga_id
            result = outcome.result
            if result is None:
                found.append(
                    f"{sid}: no result ({outcome.error}); last status {outcome.last_status}"
                )
                continue
            if result.status not in TERMINAL_STATES:
                found.append(f"{sid}: ended in {result.status.value}")
            if result.status is SagaState.COMPENSATION_FAILED and not result.needs_attention:
                found.append(f"{sid}: compensation failed, but no reason is given")
            verdict = await journal.verify(sid)
            if not verdict.ok:
                found.append(f"{sid}: chain does not verify: {verdict}")
            rows = await journal.read(sid)
            if result.head.seq != len(rows):
                found.append(f"{sid}: result head {result.head.seq}, journal has {len(rows)} rows")
            found += journal_violations(sid, rows, result.status)
            found += shop_violations(sid, rows, result.status, shop.get(sid, ShopRows()))
            if result.status is SagaState.COMPLETED:
                sold[outcome.plan.product_id] += outcome.plan.quantity
        for sid, seq in stale:
            found.append(f"{sid}: approval request at seq {seq} left behind")
    for product, before in stock_before.items():
        if before - stock_after[product] != sold[product]:
            found.append(
                f"inventory of {product}: {before} -> {stock_after[product]}, "
                f"but completed sagas reserved {sold[product]}"
            )
    return found
