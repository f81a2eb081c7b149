"""rollback_plan: what a rollback would undo, newest first, and what it leaves live."""

from __future__ import annotations

from datetime import UTC, datetime

from sagacity.journal import APPROVAL_GATE, Entry, Fate, Phase, rollback_plan


def rows(*spec: tuple[str, Phase, str, str]) -> list[Entry]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Entry("s", i, tool, phase, given, payload, at, "0" * 64)
        for i, (tool, phase, given, payload) in enumerate(spec, 1)
    ]


NO_EFFECT = '{"effect":"none","message":"m","type":"T"}'
UNKNOWN = '{"effect":"unknown","message":"m","type":"T"}'
TOOLS = {"reserve": True, "note": True, "wire": False, "order": True}


def test_newest_first_skipping_the_compensated_and_the_effectless() -> None:
    plan = rollback_plan(rows(
        ("reserve", Phase.INTENT, "1", ""), ("reserve", Phase.EXECUTED, "1", "{}"),
        ("note", Phase.INTENT, "2", ""), ("note", Phase.EXECUTED, "2", "{}"),
        ("note", Phase.INTENT, "3", ""), ("note", Phase.EXECUTED, "3", "{}"),
        ("note", Phase.COMPENSATED, "3", ""),
        ("order", Phase.INTENT, "4", ""), ("order", Phase.FAILED, "4", NO_EFFECT),
        ("order", Phase.INTENT, "5", ""), ("order", Phase.FAILED, "5", UNKNOWN),
        ("wire", Phase.AWAITING_APPROVAL, "6", ""), (APPROVAL_GATE, Phase.APPROVED, "6", ""),
        ("wire", Phase.INTENT, "6", ""), ("wire", Phase.EXECUTED, "6", "{}"),
        ("ghost", Phase.INTENT, "7", ""), ("ghost", Phase.EXECUTED, "7", "{}"),
        ("wire", Phase.AWAITING_APPROVAL, "8", ""),
    ), TOOLS)  # fmt: skip
    assert [(s.call.intent.seq, s.fate) for s in plan.steps] == [
        (16, Fate.STAYS_LIVE),  # a tool the worker does not know: as the saga, live
        (14, Fate.STAYS_LIVE),
        (10, Fate.COMPENSATE),
        (3, Fate.COMPENSATE),
        (1, Fate.COMPENSATE),
    ]
    assert [s.call.intent.seq for s in plan.compensate] == [10, 3, 1]
    assert [s.call.intent.seq for s in plan.live] == [16, 14]
    assert plan.steps[2].check == "failed, and may have taken effect"
    assert [c.intent.seq for c in plan.compensated] == [5]
    assert plan.awaiting_approval is not None and plan.awaiting_approval.seq == 18


def test_a_call_without_outcome_comes_first_flagged() -> None:
    plan = rollback_plan(rows(
        ("reserve", Phase.INTENT, "1", ""), ("reserve", Phase.EXECUTED, "1", "{}"),
        ("wire", Phase.AWAITING_APPROVAL, "2", ""), (APPROVAL_GATE, Phase.REJECTED, "2", ""),
        ("note", Phase.INTENT, "3", ""),
    ), TOOLS)  # fmt: skip
    first = plan.steps[0]
    assert (first.call.intent.seq, first.fate) == (5, Fate.COMPENSATE)
    assert first.check is not None and "SUSPECT" in first.check
    assert plan.awaiting_approval is None


def test_a_failed_compensation_stays_live() -> None:
    plan = rollback_plan(rows(
        ("reserve", Phase.INTENT, "1", ""), ("reserve", Phase.EXECUTED, "1", "{}"),
        ("reserve", Phase.COMPENSATION_FAILED, "1", ""),
    ), TOOLS)  # fmt: skip
    assert [(s.fate, s.check) for s in plan.steps] == [
        (Fate.STAYS_LIVE, "its compensation failed: the effect is live")
    ]
