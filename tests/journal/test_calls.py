"""read_calls: the calls a saga's rows tell, and which compensation rows name which call."""

from __future__ import annotations

from datetime import UTC, datetime

from sagacity.journal import Entry, Phase, read_calls


def rows(*spec: tuple[str, Phase, str]) -> list[Entry]:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        Entry("s", i, tool, phase, given, "", at, "0" * 64)
        for i, (tool, phase, given) in enumerate(spec, 1)
    ]


def test_a_compensation_names_the_newest_call_of_that_input_and_a_retry_follows_a_failure() -> None:
    calls = read_calls(rows(
        ("a", Phase.INTENT, "1"), ("a", Phase.EXECUTED, "1"),
        ("a", Phase.INTENT, "2"), ("a", Phase.EXECUTED, "2"),
        ("b", Phase.INTENT, "x"),  # no outcome yet
        ("a", Phase.COMPENSATION_FAILED, "2"), ("a", Phase.COMPENSATED, "2"),
        ("a", Phase.COMPENSATED, "1"),
        ("c", Phase.COMPENSATED, "?"),  # names no call
    ))  # fmt: skip
    assert [(c.intent.seq, c.outcome and c.outcome.seq) for c in calls] == [
        (1, 2),
        (3, 4),
        (5, None),
    ]
    assert [[u.seq for u in c.undo] for c in calls] == [[8], [6, 7], []]
    assert [c.undone for c in calls] == [Phase.COMPENSATED, Phase.COMPENSATED, None]
