"""Two attempts of one call that overlap (attempt 2 started while attempt 1 still runs, or two
started at once): each seals its INTENT at its own microsecond, so the exclusive INTENT write
lets exactly one of them run the tool; a write retried after a lost answer (the same seal) must
not open that door.

The activities run in Temporal's ActivityEnvironment against the real journal in Postgres.
"""

from __future__ import annotations

import asyncio
import dataclasses
import uuid

from temporalio.testing import ActivityEnvironment

from sagacity import compensable
from sagacity.journal import GENESIS_HASH, Phase
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.activities import SagaActivities
from sagacity.temporal.models import CallOutcome, CallRequest, CallStatus
from sagacity.tools import ToolRegistry

RAN: list[str] = []


async def _unsend(ctx: object) -> None:
    """Nothing to take back in this test."""


@compensable(by=_unsend)
async def send_slowly(to: str) -> dict[str, str]:
    """Send (not idempotent), slowly enough for the other attempt to arrive meanwhile."""
    RAN.append(to)
    await asyncio.sleep(0.5)
    return {"sent": to}


def _attempt(number: int) -> ActivityEnvironment:
    env = ActivityEnvironment()
    env.info = dataclasses.replace(env.info, attempt=number)
    return env


async def _later(env: ActivityEnvironment, acts: SagaActivities, req: CallRequest) -> CallOutcome:
    await asyncio.sleep(0.1)  # attempt 1 has written INTENT and is running the tool
    return await env.run(acts.call_tool, req)


async def test_overlapping_attempts_of_one_call_run_the_tool_once(
    journal: JournalStore, approvals: ApprovalStore
) -> None:
    for second in (1, 2):  # started together, or attempt 2 while attempt 1 runs
        RAN.clear()
        acts = SagaActivities(journal, approvals, ToolRegistry([send_slowly]))
        saga_id = f"overlap-{uuid.uuid4().hex[:8]}"
        request = CallRequest(
            saga_id=saga_id,
            seq=1,
            prev_hash=GENESIS_HASH,
            tool_name="send_slowly",
            args={"to": "z"},
        )

        first, other = await asyncio.gather(
            _attempt(1).run(acts.call_tool, request),
            _later(_attempt(second), acts, request),
            return_exceptions=True,
        )
        assert RAN == ["z"], (second, first, other)  # the tool ran once
        assert isinstance(first, CallOutcome) and first.status is CallStatus.EXECUTED
        # the overlapping attempt did not take the call as its own (no second EXECUTED)
        assert not (isinstance(other, CallOutcome) and other.status is CallStatus.EXECUTED)
        phases = [r.phase for r in await journal.read(saga_id)]
        assert phases[:2] == [Phase.INTENT, Phase.EXECUTED] and phases.count(Phase.INTENT) == 1
