"""Activities: where tool calls, compensations and journal writes actually happen.

:class:`SagaActivities` composes the parts, each of one job: ``calls`` (a tool call and its
recovery), ``writes`` (the journal, checkpoints, seals, the halt read), ``approvals`` (requests,
and the checks a decision or resolution must pass), ``compensation`` (one undo, once) and
``tools`` (the catalog); ``state`` is what they share. Every append is at a seq the workflow
chose, so a retried or replayed activity finds its own row and moves on instead of writing twice.
"""

from sagacity.temporal.activities.serve import SagaActivities
from sagacity.temporal.activities.state import DEFAULT_OUTAGE_WINDOW, journal_among

__all__ = ["DEFAULT_OUTAGE_WINDOW", "SagaActivities", "journal_among"]
