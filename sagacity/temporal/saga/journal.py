"""The saga's journal writes from workflow code: each one an activity a Temporal cancel cannot break.

When the journal is ahead of this run (another run wrote to it), a write re-reads it first.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

from pydantic import BaseModel
from temporalio import workflow
from temporalio.exceptions import ActivityError

from sagacity.temporal import names
from sagacity.temporal.failures import error_type
from sagacity.temporal.models import (
    AppendRequest,
    ApprovalClose,
    Resolve,
    Resolved,
    ResolveRequest,
    RowDraft,
    RowRef,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import AHEAD, Desync, SagaCore
from sagacity.temporal.waits import JOURNAL_RETRY, JOURNAL_TIMEOUT

T = TypeVar("T")


class Journal:
    """Writes rows after the saga's head; ``catch_up`` re-reads the journal when it is ahead."""

    def __init__(
        self, core: SagaCore, controls: Controls, catch_up: Callable[[], Awaitable[object]]
    ) -> None:
        self._core = core
        self._controls = controls
        self._catch_up = catch_up

    async def activity(self, name: str, request: BaseModel, result_type: type[T]) -> T:
        """A journal write; when the journal is ahead of this run, :class:`Desync` is raised."""
        try:
            result: T = await self._controls.shielded(
                workflow.start_activity(
                    name,
                    request,
                    result_type=result_type,
                    start_to_close_timeout=JOURNAL_TIMEOUT,
                    heartbeat_timeout=self._core.heartbeat_timeout(None),
                    retry_policy=JOURNAL_RETRY,
                )
            )
        except ActivityError as err:
            if error_type(err) in AHEAD:
                raise Desync from err
            raise
        return result

    async def append(self, rows: list[RowDraft]) -> list[RowRef]:
        """Append ``rows`` at the head, re-reading the journal first as often as it is ahead."""
        core = self._core
        while True:
            request = AppendRequest(
                saga_id=core.saga_id, seq=core.head.seq + 1, prev_hash=core.head.hash, rows=rows
            )
            try:
                written: list[RowRef] = await self.activity(names.APPEND, request, list[RowRef])
            except Desync:
                await self._catch_up()
                continue
            core.track(written)
            return written

    async def close_request(self, journal_seq: int) -> None:
        """Close the approval request at ``journal_seq`` (approvers no longer see it)."""
        request = ApprovalClose(saga_id=self._core.saga_id, journal_seq=journal_seq)
        await self.activity(names.CLOSE_APPROVAL, request, bool)

    async def record_outcome(
        self, seq: int, row: RowDraft, approval_seq: int | None, resolution: Resolve | None = None
    ) -> Resolved:
        """Write the outcome of the call at ``seq`` unless it has one (which is returned);
        ``resolution``: the human's word the row records, which the worker checks first."""
        request = ResolveRequest(
            saga_id=self._core.saga_id,
            call_seq=seq,
            row=row,
            approval_seq=approval_seq,
            resolution=resolution,
        )
        resolved: Resolved = await self.activity(names.RESOLVE_CALL, request, Resolved)
        return resolved
