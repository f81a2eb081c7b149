"""A Steps saga's open checks its steps before it claims the journal. When the same run chain
opens again (its first workflow task replayed on another worker after the claim, or a reset to
that task) on a worker whose tools no longer fit the steps, the journal is already this chain's
and may hold executed steps: the open must not refuse the saga as if nothing had run (StepsInvalid
says "nothing was journaled"; the saga would end without compensating its effects).

The activity runs in Temporal's ActivityEnvironment against the real journal in Postgres.
"""

from __future__ import annotations

import uuid

from temporalio.testing import ActivityEnvironment

from sagacity import compensable
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.activities import SagaActivities
from sagacity.temporal.models import SagaOpen, Step
from sagacity.tools import ToolRegistry
from tests.temporal.test_compensation_attempts import executed_call


async def _unbook(ctx: object) -> None:
    """Nothing to undo in this test."""


@compensable(by=_unbook)
async def book(room: str) -> dict[str, str]:
    """Book a room."""
    return {"booking": f"b-{room}"}


async def test_a_chain_that_holds_its_journal_is_not_refused_by_a_later_check(
    journal: JournalStore, approvals: ApprovalStore
) -> None:
    saga_id = f"reopen-{uuid.uuid4().hex[:8]}"
    request = SagaOpen(
        saga_id=saga_id,
        workflow_id=saga_id,
        first_run_id=str(uuid.uuid4()),
        steps=[Step(tool="book", args={"room": "12"})],
    )
    before = SagaActivities(journal, approvals, ToolRegistry([book]))
    opened = await ActivityEnvironment().run(before.open_saga, request)
    assert not opened.problems and [t.name for t in opened.tools] == ["book"]
    await executed_call(journal, saga_id)  # step one ran: INTENT, EXECUTED

    # the same chain opens again on a worker that no longer serves the step's tool
    after = SagaActivities(journal, approvals, ToolRegistry([]))
    again = await ActivityEnvironment().run(after.open_saga, request)

    assert not again.problems, again.problems
    assert [r.seq for r in again.rows] == [1, 2]  # the run adopts what ran, to compensate it
