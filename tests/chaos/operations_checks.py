"""What must hold after the operations chaos, read from the journal and the shop's own tables.

Each check returns violations as sentences naming the saga; none means it held. Besides the
violations, :func:`judge` sorts how the sagas ended: as planned, otherwise for a reason the journal
shows (a call FAILED: a timeout, a SUSPECT call nobody saw happen), or left to a human
(needs_attention, COMPENSATION_FAILED). A saga that ended otherwise with no such reason is a
violation: something (a bad signal, say) changed its course.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import psycopg

from sagacity.journal import APPROVAL_GATE, Entry, Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import TERMINAL_STATES, SagaResult, SagaState
from tests.chaos.operations import CANCELLED, Fate, OpsOutcome
from tests.chaos.operator_moves import HOLD_S

#: the tools each saga calls once, with an undo; and the one that needs an approval
COMPENSABLE = ("reserve_inventory", "create_order", "book_courier", "make_note", "attach_note")
IRREVERSIBLE = "send_confirmation"
#: the call of a BIG_ARGUMENT saga whose argument is 3 MB
BIG_CALL = "attach_note"
#: what the runtime journals when an abort lands between APPROVED and the approved call
ABORTED_AFTER_APPROVAL = "aborted before the approved call ran"


@dataclass
class ShopRows:
    """What the shop's tables hold for one saga: a status per row."""

    reservations: list[str] = field(default_factory=list)
    orders: list[str] = field(default_factory=list)
    outbox: list[int] = field(default_factory=list)
    courier: list[str] = field(default_factory=list)
    courier_attempts: int = 0
    #: the note tools' rows, by tool
    notes: dict[str, list[str]] = field(default_factory=dict)

    def of(self, tool: str) -> list[Any]:
        made: dict[str, list[Any]] = {
            "reserve_inventory": self.reservations,
            "create_order": self.orders,
            IRREVERSIBLE: self.outbox,
            "book_courier": self.courier,
        }
        return made[tool] if tool in made else self.notes.get(tool, [])

    def live(self) -> dict[str, int]:
        """The effects still in force, by tool (all but the mail, which nothing undoes)."""
        return {
            "reserve_inventory": self.reservations.count("held"),
            "create_order": self.orders.count("placed"),
            "book_courier": self.courier.count("booked"),
            **{tool: rows.count("live") for tool, rows in self.notes.items()},
        }


async def shop_rows(database_url: str) -> tuple[dict[str, ShopRows], dict[str, int]]:
    """Every saga's rows in the shop's tables, and the stock per product."""
    rows: dict[str, ShopRows] = {}

    def of(saga_id: str) -> ShopRows:
        return rows.setdefault(saga_id, ShopRows())

    async with await psycopg.AsyncConnection.connect(database_url) as conn:

        async def fetch(query: str) -> list[tuple[Any, ...]]:
            return await (await conn.execute(query)).fetchall()

        for sid, status in await fetch("SELECT saga_id, status FROM reservations"):
            of(sid).reservations.append(status)
        for sid, status in await fetch("SELECT saga_id, status FROM orders"):
            of(sid).orders.append(status)
        for sid, message in await fetch("SELECT saga_id, id FROM outbox"):
            of(sid).outbox.append(message)
        for sid, status, attempts in await fetch(
            "SELECT saga_id, status, attempts FROM courier_bookings"
        ):
            of(sid).courier.append(status)
            of(sid).courier_attempts += attempts
        for sid, tool, status in await fetch("SELECT saga_id, tool, status FROM chaos_notes"):
            of(sid).notes.setdefault(tool, []).append(status)
        stock = dict(await fetch("SELECT product_id, available FROM inventory"))
    return rows, stock


def _body(row: Entry) -> dict[str, Any]:
    try:
        body = json.loads(row.payload) if row.payload else {}
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def effects(rows: list[Entry]) -> dict[str, str]:
    """Tools that took effect or may have: ``executed`` or ``unknown`` (FAILED, effect unknown)."""
    found: dict[str, str] = {}
    for row in rows:
        if row.phase is Phase.EXECUTED:
            found[row.tool_name] = "executed"
        elif row.phase is Phase.FAILED and _body(row).get("effect", "unknown") != "none":
            found[row.tool_name] = "unknown"
    return found


def journal_violations(
    sid: str, rows: list[Entry], result: SagaResult, *, runs: int = 1
) -> list[str]:
    """Order, pairing, approvals and undo, from the saga's rows alone; ``runs``: how many runs
    wrote them (a reset starts another, which may ask for the approval again)."""
    found: list[str] = []
    state = result.status
    if [r.seq for r in rows] != list(range(1, len(rows) + 1)):
        found.append(f"{sid}: seq is not gap-free from 1: {[r.seq for r in rows]}")
    if result.head.seq != len(rows) or (rows and result.head.hash != rows[-1].hash):
        found.append(f"{sid}: the result's head (seq {result.head.seq}) is not the journal's")
    by_seq = {r.seq: r for r in rows}
    for tool, n in Counter(r.tool_name for r in rows if r.phase is Phase.INTENT).items():
        if n > 1:
            found.append(f"{sid}: {n} INTENT rows for {tool}: it ran more than once")
    for row in rows:
        before, after = by_seq.get(row.seq - 1), by_seq.get(row.seq + 1)
        if row.phase is Phase.INTENT and (
            after is None
            or after.phase not in (Phase.EXECUTED, Phase.FAILED)
            or after.tool_name != row.tool_name
        ):
            found.append(f"{sid}: INTENT of {row.tool_name} at seq {row.seq} has no outcome")
        if row.phase in (Phase.EXECUTED, Phase.FAILED) and (
            before is None
            or before.phase is not Phase.INTENT
            or (before.tool_name, before.input) != (row.tool_name, row.input)
        ):
            found.append(f"{sid}: {row.phase} of {row.tool_name} at seq {row.seq} has no INTENT")
        if (
            row.phase is Phase.INTENT
            and row.tool_name == IRREVERSIBLE
            and (
                before is None
                or (before.tool_name, before.phase) != (APPROVAL_GATE, Phase.APPROVED)
            )
        ):
            found.append(f"{sid}: {IRREVERSIBLE} ran without an approval right before it")
        if (
            (row.tool_name, row.phase) == (APPROVAL_GATE, Phase.REJECTED)
            and before is not None
            and (before.tool_name, before.phase) == (APPROVAL_GATE, Phase.APPROVED)
            and ABORTED_AFTER_APPROVAL not in row.payload
        ):
            found.append(f"{sid}: REJECTED after APPROVED at seq {row.seq}: {row.payload}")
    requests = sum(r.phase is Phase.AWAITING_APPROVAL for r in rows)
    approved = sum((r.tool_name, r.phase) == (APPROVAL_GATE, Phase.APPROVED) for r in rows)
    rejected = sum((r.tool_name, r.phase) == (APPROVAL_GATE, Phase.REJECTED) for r in rows)
    if requests > runs or approved > requests or rejected > requests:
        found.append(
            f"{sid}: {requests} approval requests, {approved} APPROVED, {rejected} REJECTED"
        )
    undone = Counter(
        r.tool_name for r in rows if r.phase in (Phase.COMPENSATED, Phase.COMPENSATION_FAILED)
    )
    for tool, n in undone.items():
        if n > 1:
            found.append(f"{sid}: {tool} undone {n} times")
    took = effects(rows)
    if state is SagaState.COMPLETED:
        if undone:
            found.append(f"{sid}: completed, yet {sorted(undone)} were undone")
        if took.get(IRREVERSIBLE) != "executed":
            found.append(f"{sid}: completed without an EXECUTED {IRREVERSIBLE}")
        return found
    live = {e.tool_name for e in result.live_effects}
    for tool, how in took.items():
        if tool in COMPENSABLE and undone[tool] != 1:
            found.append(f"{sid}: ended {state.value} with {tool} {how}, not compensated")
        if tool == IRREVERSIBLE and tool not in live:
            found.append(f"{sid}: {IRREVERSIBLE} {how}, but not among the live effects")
        if tool == IRREVERSIBLE and how == "unknown" and not result.needs_attention:
            found.append(f"{sid}: {IRREVERSIBLE} may have gone out, and nobody is told")
    return found


def shop_violations(sid: str, rows: list[Entry], result: SagaResult, shop: ShopRows) -> list[str]:
    """The shop's tables agree with the journal: each effect once, journaled, undone if undone."""
    found: list[str] = []
    intents = {r.tool_name for r in rows if r.phase is Phase.INTENT}
    took = effects(rows)
    failed_undo = {r.tool_name for r in rows if r.phase is Phase.COMPENSATION_FAILED}
    for tool in (*COMPENSABLE, IRREVERSIBLE):
        made = shop.of(tool)
        if len(made) > 1:
            found.append(f"{sid}: {tool} took effect {len(made)} times")
        if made and tool not in intents:
            found.append(f"{sid}: {tool} took effect without an INTENT row")
        if made and tool not in took:
            found.append(f"{sid}: {tool} took effect, the journal says it did not")
        if took.get(tool) == "executed" and not made:
            found.append(f"{sid}: the journal says {tool} EXECUTED, the shop has no trace of it")
    live = shop.live()
    if result.status is SagaState.COMPLETED:
        want = {tool: int(tool in intents) for tool in live}
        want |= {"reserve_inventory": 1, "create_order": 1}
        if live != want or len(shop.outbox) != 1:
            found.append(f"{sid}: completed, with {live} live and {len(shop.outbox)} mails")
    else:
        for tool, n in live.items():
            if n and tool not in failed_undo:
                found.append(f"{sid}: ended {result.status.value}, {tool} still live in the shop")
    return found


def refusal_violations(out: OpsOutcome) -> list[str]:
    """Every bad signal and refused ``decide`` update that reached the saga is recorded as
    refused, and nothing else is.

    Raw decisions (bytes no client writes, naming no request of the saga's) may be recorded as
    malformed or as misdirected, but each must be recorded.
    """
    sid, sent, updates = out.plan.saga_id, out.signals, out.updates
    # refused updates are recorded too: the bad ones, and a planned decision sent again
    refused_updates = updates["refused"] + updates["repeated"]
    raw, unsure = sent["raw"], sent["unsure"]
    if not (sent["malformed"] or sent["misdirected"] or unsure or raw or refused_updates):
        return []
    if out.final is None:
        why = f" (its history does not replay: {out.unreplayable})" if out.unreplayable else ""
        return [f"{sid}: ended, but its status could not be queried{why}"]
    refused = out.final.refused_decisions
    malformed = sum("malformed" in r and "signal:" in r for r in refused)
    other = len(refused) - malformed
    found = []
    if not sent["malformed"] <= malformed <= sent["malformed"] + unsure + raw:
        found.append(f"{sid}: {sent['malformed']} malformed signals sent, {malformed} recorded")
    expected = sent["misdirected"] + refused_updates
    if not expected <= other <= expected + unsure + raw + updates["unanswered"]:
        found.append(
            f"{sid}: {sent['misdirected']} misdirected decisions and {refused_updates} refused "
            f"updates sent, {other} other refusals recorded: {refused}"
        )
    if len(refused) < sent["malformed"] + expected + raw:
        found.append(
            f"{sid}: {raw} decisions sent as raw bytes (deep JSON, lone surrogates, invalid "
            f"UTF-8) and {len(refused) - sent['malformed'] - expected} of them recorded in "
            "refused_decisions"
        )
    return found


def rollback_violations(out: OpsOutcome, shop: ShopRows) -> list[str]:
    """TERMINATE_ROLLBACK: the rollback command compensated every effect the saga left live."""
    sid, rollback = out.plan.saga_id, out.rollback
    if rollback is None:
        return [f"{sid}: to be terminated at its gate, it ended first ({out.error})"]
    if rollback.missing:
        return [
            f"{sid}: terminated, and `sagacity saga rollback` does not exist: its effects stay "
            f"live ({shop.live()}) (merge the branch that adds it)"
        ]
    found = []
    if rollback.code != 0:
        found.append(f"{sid}: `saga rollback --wait` exited {rollback.code}: {rollback.output}")
    live = {tool: n for tool, n in shop.live().items() if n}
    if live:
        found.append(f"{sid}: terminated and rolled back, yet still live in the shop: {live}")
    return found


def hold_violations(out: OpsOutcome) -> list[str]:
    """HALT_COMPENSATING: under the ``keep`` halt no undo started (the one running may end)."""
    hold = out.hold
    if hold is None:
        return []  # its compensations ended before a halt could be made (Postgres away, say)
    if hold.undone_at_lift > hold.undone_at_halt + 1:
        return [
            f"{out.plan.saga_id}: under a keep halt, compensations went on: "
            f"{hold.undone_at_lift - hold.undone_at_halt} undone in {HOLD_S:.0f}s"
        ]
    return []


def live_sagas(outcomes: list[OpsOutcome], shops: dict[str, ShopRows]) -> dict[str, str]:
    """The sagas a person must look at, by the shop's tables and the sagas' ends: an effect live
    after a saga that did not complete, or a saga flagged for a human; with why."""
    found = {}
    for out in outcomes:
        sid, result = out.plan.saga_id, out.result
        if result is not None and (
            result.needs_attention or result.status is SagaState.COMPENSATION_FAILED
        ):
            found[sid] = f"flagged: {result.status.value}: {result.needs_attention}"
            continue
        if result is not None and result.status is SagaState.COMPLETED:
            continue
        live = {tool: n for tool, n in shops.get(sid, ShopRows()).live().items() if n}
        if live:
            found[sid] = f"live in the shop: {live}"
    return found


@dataclass
class Judgement:
    """The violations, and how the sagas ended."""

    violations: list[str] = field(default_factory=list)
    #: sagas that ended otherwise than planned, for a reason the journal shows
    deviations: Counter[str] = field(default_factory=Counter)
    #: sagas left to a human, with what they are told
    flagged: list[str] = field(default_factory=list)
    #: courier attempts beyond the first (timeouts retried, the booking made once)
    courier_retries: int = 0
    #: abort-right-after-approve sagas whose confirmation went out before the abort landed
    sent_despite_abort: int = 0
    #: the sagas a person must look at, with why (what ``certify`` must fail, and only those)
    live: dict[str, str] = field(default_factory=dict)


def _deviation(out: OpsOutcome, rows: list[Entry], result: SagaResult) -> str | None:
    """Why the saga did not end as planned (None if it did); ``!`` starts an unexplained one."""
    plan, state = out.plan, result.status
    if state is plan.expected:
        if state is SagaState.ABORTED and not any(r.phase is Phase.FAILED for r in rows):
            want = "SagaCancelled" if plan.fate in CANCELLED else "SagaAborted"
            if result.error is None or result.error.type != want:
                return f"! ended aborted with error {result.error}, not {want}"
        return None
    planned_failures = {"book_courier"} if plan.fate is Fate.COURIER_FAILS else set()
    failed = [r for r in rows if r.phase is Phase.FAILED and r.tool_name not in planned_failures]
    if plan.fate is Fate.BIG_ARGUMENT and state is SagaState.COMPENSATED:
        # refused, typed, before the call's INTENT: the big argument never entered the journal
        if result.error is None or any(r.tool_name == BIG_CALL for r in rows):
            return f"! {BIG_CALL} got an INTENT, then the saga ended compensated ({result.error})"
        return f"3 MB argument refused ({result.error.type}: {result.error.message[:120]})"
    if failed and state in (SagaState.COMPENSATED, SagaState.ABORTED):
        first = _body(failed[0])
        return (
            f"{failed[0].tool_name} FAILED ({first.get('type')}, effect {first.get('effect')}): "
            f"{plan.expected.value} -> {state.value}"
        )
    return f"! planned {plan.expected.value}, ended {state.value} ({result.error})"


async def judge(
    database_url: str, outcomes: list[OpsOutcome], stock_before: dict[str, int]
) -> Judgement:
    """Every invariant over every saga the driver ran."""
    verdict = Judgement()
    found = verdict.violations
    shops, stock_after = await shop_rows(database_url)
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        stale = await (
            await conn.execute("SELECT saga_id, journal_seq FROM sagacity_approval_request")
        ).fetchall()
    verdict.live = live_sagas(outcomes, shops)
    sold: Counter[str] = Counter()
    async with await JournalStore.open(database_url) as journal:
        for out in outcomes:
            sid, result = out.plan.saga_id, out.result
            found += [f"{sid}: {p}" for p in out.problems]
            found += [f"{sid}: reusing its id: {r[2:]}" for r in out.reuse if r.startswith("!")]
            shop = shops.get(sid, ShopRows())
            if out.plan.fate is Fate.TERMINATE_ROLLBACK and result is None:
                found += rollback_violations(out, shop)
                verified = await journal.verify(sid)
                if not verified.ok:
                    found.append(f"{sid}: the chain does not verify: {verified.problem}")
                continue
            if result is None:
                found.append(f"{sid}: no end ({out.error})")
                continue
            if out.plan.fate is Fate.HALT_COMPENSATING:
                found += hold_violations(out)
            if result.status not in TERMINAL_STATES:
                found.append(f"{sid}: ended in {result.status.value}")
            verified = await journal.verify(sid)
            if not verified.ok:
                found.append(f"{sid}: the chain does not verify: {verified.problem}")
            rows = await journal.read(sid)
            found += journal_violations(sid, rows, result, runs=2 if out.reset_run else 1)
            found += shop_violations(sid, rows, result, shop)
            found += refusal_violations(out)
            why = _deviation(out, rows, result)
            if why is not None and why.startswith("!"):
                found.append(f"{sid} ({out.plan.fate.value}): {why[2:]}")
            elif why is not None:
                verdict.deviations[why] += 1
            if result.needs_attention or result.status is SagaState.COMPENSATION_FAILED:
                verdict.flagged.append(f"{sid}: {result.status.value}: {result.needs_attention}")
            verdict.courier_retries += max(0, shop.courier_attempts - len(shop.courier))
            if out.plan.fate is Fate.ABORT_AFTER_APPROVE and shop.outbox:
                verdict.sent_despite_abort += 1
            if result.status is SagaState.COMPLETED:
                sold[out.plan.product_id] += out.plan.quantity
        for sid, seq in stale:
            found.append(f"{sid}: approval request at seq {seq} left behind")
    for product, before in stock_before.items():
        if any(o.result is None and o.plan.fate is not Fate.TERMINATE_ROLLBACK for o in outcomes):
            break  # a saga without an end is a violation already; the stock cannot add up
        if before - stock_after[product] != sold[product]:
            found.append(
                f"inventory of {product}: {before} -> {stock_after[product]}, "
                f"but completed sagas reserved {sold[product]}"
            )
    return verdict
