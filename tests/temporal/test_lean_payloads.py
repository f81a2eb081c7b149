"""History payloads of a tool call leave out the fields at their default, and read back whole."""

from __future__ import annotations

import json
from typing import Any

from sagacity.journal import Phase
from sagacity.temporal.codec import PayloadConverter
from sagacity.temporal.models import (
    CallOutcome,
    CallRequest,
    CallStatus,
    ErrorInfo,
    Journaled,
    RowRef,
    SagaState,
)


def _round_trip(value: CallRequest | CallOutcome) -> tuple[dict[str, Any], object]:
    converter = PayloadConverter()
    (payload,) = converter.to_payloads([value])
    (back,) = converter.from_payloads([payload], [type(value)])
    return json.loads(payload.data), back


def test_a_plain_call_writes_only_the_fields_it_sets() -> None:
    request = CallRequest(saga_id="s", seq=1, prev_hash="0" * 64, tool_name="t", args={"n": 1})
    outcome = CallOutcome(
        status=CallStatus.EXECUTED,
        result={"n": 1},
        rows=[RowRef(seq=1, tool_name="t", phase=Phase.INTENT, hash="a" * 64)],
    )
    for value, fields in (
        (request, ["saga_id", "seq", "prev_hash", "tool_name", "args"]),
        (outcome, ["status", "result", "rows"]),
    ):
        data, back = _round_trip(value)
        assert list(data) == fields
        assert back == value
    assert list(_round_trip(outcome)[0]["rows"][0]) == ["seq", "tool_name", "phase", "hash"]


def test_fields_set_away_from_their_default_are_written() -> None:
    request = CallRequest(
        saga_id="s",
        seq=1,
        prev_hash="0" * 64,
        tool_name="t",
        args={},
        approval_seq=0,
        seal_as=SagaState.COMPLETED,
        anchor_intent=True,
    )
    outcome = CallOutcome(
        status=CallStatus.FAILED,
        error=ErrorInfo(type="E", message="m"),
        rows=[RowRef(seq=2, tool_name="t", phase=Phase.FAILED, hash="b" * 64, sealed=True)],
        effect_unknown=True,
        journaled=Journaled(),
    )
    request_data, request_back = _round_trip(request)
    assert request_data["approval_seq"] == 0 and request_data["seal_as"] == "completed"
    assert request_data["anchor_intent"] is True and request_back == request
    outcome_data, outcome_back = _round_trip(outcome)
    # a nested model that is not lean keeps its defaults
    assert outcome_data["journaled"] == {"input": {}, "result": None}
    assert outcome_data["rows"][0]["sealed"] is True and outcome_back == outcome
