"""format_timestamp, which every row's hash covers, is byte for byte the form it always had
(four-digit year, then strftime's fields): a row hashed before the rewrite hashes the same."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given, settings
from hypothesis import strategies as st

from sagacity.journal import utc_micros
from sagacity.journal.chain import format_timestamp


def _reference(ts: datetime) -> str:
    """The form before the rewrite (strftime, the year padded by hand)."""
    t = utc_micros(ts)
    return f"{t.year:04d}-{t.strftime('%m-%dT%H:%M:%S.%f')}Z"


_ZONES = st.one_of(
    st.none(),
    st.builds(
        timezone,
        st.timedeltas(
            min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
        ),
    ),
)


@settings(max_examples=3000, deadline=None)
@given(
    # naive and aware values mixed: hypothesis draws them so at run time, but its overloads
    # type a bounded range only with zones that are all aware or all naive
    st.datetimes(
        min_value=datetime(2, 1, 1),
        max_value=datetime(9998, 12, 31),
        timezones=_ZONES,  # type: ignore[arg-type]
    )
)
def test_the_form_is_unchanged(ts: datetime) -> None:
    assert format_timestamp(ts) == _reference(ts)


def test_edges() -> None:
    for ts in (
        datetime(1, 1, 1),
        datetime(9999, 12, 31, 23, 59, 59, 999999),
        datetime(999, 9, 9, 9, 9, 9, 9),
        datetime(2026, 1, 2, 3, 4, 5, 6),
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(seconds=7, microseconds=3))),
        datetime(2024, 2, 29, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-5))),
    ):
        assert format_timestamp(ts) == _reference(ts)
    assert format_timestamp(datetime(2026, 1, 2, 3, 4, 5, 6)) == "2026-01-02T03:04:05.000006Z"
