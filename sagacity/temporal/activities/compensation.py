"""A compensation as one activity: undo one effect once, under the undo lock, and journal it."""

from __future__ import annotations

import asyncio
import inspect
import json
from dataclasses import replace
from functools import partial
from typing import Any

from pydantic_core import to_jsonable_python
from temporalio import activity
from temporalio.exceptions import ApplicationError

from sagacity.errors import (
    Halted,
    JournalAhead,
    PermanentCompensationError,
    ResultUnavailable,
    SeqConflict,
    StoreUnavailable,
    UnknownTool,
)
from sagacity.journal import (
    Draft,
    Entry,
    JournaledResult,
    Phase,
    correction_payload,
    read_correction,
)
from sagacity.journal.results import read_input, read_result
from sagacity.temporal.activities.notices import halted
from sagacity.temporal.activities.outcomes import ref
from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.activities.typed import non_retryable, scrubbed, typed
from sagacity.temporal.activities.writes import JournalWrites
from sagacity.temporal.models import CompensateRequest, RowRef, undo_attempt_detail
from sagacity.temporal.names import COMPENSATE
from sagacity.tools import CompensationContext, RegisteredTool, Reversibility

__all__ = ["Compensation"]

#: a compensation's errors that no retry can fix: declared so, or a programming error in the
#: undo itself (a missing key of its context is a PermanentCompensationError too)
_PERMANENT_UNDO = (PermanentCompensationError, TypeError, AttributeError, NameError)


class Compensation:
    """The undo of one effect: held while a halt holds it, run from the journal's view of the
    effect when the workflow carries it by reference, never twice."""

    def __init__(self, state: ActivityState, writes: JournalWrites) -> None:
        self.state = state
        self.writes = writes

    @activity.defn(name=COMPENSATE)
    @typed
    async def compensate(self, req: CompensateRequest) -> list[RowRef]:
        """Undo one effect, once: whichever attempt holds the undo lock runs it.

        Every attempt heartbeats from its start, and looks for the COMPENSATED row once it holds
        the lock (a later attempt also before), so an attempt that overlaps a slow one, or follows
        one that died after writing, never undoes twice.
        """
        if req.by_ref or req.result_by_ref:
            req = await self._from_journal(req)
        done = self.state.draft(req.saga_id, req.tool_name, Phase.COMPENSATED, req.input_json)
        tool = self.state.tools.get(req.tool_name)
        if tool.compensation is None:
            raise UnknownTool(f"tool {req.tool_name!r} has no compensation")
        first_try = activity.info().attempt == 1
        while True:
            # only a later attempt can find the row already written before it takes the lock
            if not first_try:
                written = await self._compensated(req, done)
                if written is not None:
                    return written
            first_try = False
            # the lock, the row where COMPENSATED goes and the halts, in one round trip
            claim = self.state.journal.undo_claim(
                req.saga_id,
                req.call_seq,
                row_seq=req.seq,
                tool_name=req.tool_name,
                task_queue=activity.info().task_queue,
            )
            async with claim as held:
                if held.mine:
                    # the lock holder that finished before us may have written it (read once
                    # the lock was taken)
                    if held.written is not None:
                        return await self._found(req, done, held.written)
                    if held.halt_id is not None:
                        await self._unless_held(req, held.halt_id)
                    row_draft = self._row(req, tool, done, await self._undo(req, tool))
                    try:
                        try:
                            # written, committed and unlocked in one round trip
                            row = await self.state.journal.append_claimed(
                                held, row_draft, seq=req.seq, prev_hash=req.prev_hash
                            )
                        except StoreUnavailable:
                            # the lock's session failed mid-write (the row may be in): as any
                            # append, waiting out an outage, and an identical row is this one
                            row = await self.writes.append_at(
                                row_draft, seq=req.seq, prev_hash=req.prev_hash, anchor=False
                            )
                    except SeqConflict:
                        # the undo ran, so the journal must say so: another writer took the seq
                        # (a rollback of this saga's terminated run, while this undo ran), and
                        # the row goes after the tail, where that rollback's own attempt at
                        # this undo looks for it (under this lock) before running it again
                        row = await self.state.outlast(
                            partial(self.state.journal.append, row_draft)
                        )
                    return [_compensated_ref(row, self.writes.checkpoint(row, req.seal_as))]
            # another attempt is undoing this effect right now: wait for it to finish or die
            await asyncio.sleep(1.0)

    async def _unless_held(self, req: CompensateRequest, halt_id: int) -> None:
        """Raise ``Halted`` when a freezing halt or a quarantine covers this compensation: the
        halt ``halt_id`` the gate named, read in full for the notice."""
        halt = await self.state.outlast(lambda: self.state.halts.get(halt_id))
        if halt is not None:
            raise await halted(
                self.state,
                Halted(
                    f"saga {req.saga_id!r}: the compensation of {req.tool_name!r} (call seq "
                    f"{req.call_seq}) did not start: halt {halt.id} holds it",
                    halt.id,
                ),
            )

    async def _from_journal(self, req: CompensateRequest) -> CompensateRequest:
        """An effect carried by reference: its input (unless only its result is) and result, as
        the journal holds them (read by ``read_result``). ``ResultUnavailable`` when the journal
        holds no real one: redacted, or never journaled."""
        intent = await self.state.outlast(lambda: self.state.journal.get(req.saga_id, req.call_seq))
        outcome = await self.state.outlast(
            lambda: self.state.journal.get(req.saga_id, req.call_seq + 1)
        )
        if intent is None or intent.phase is not Phase.INTENT or intent.tool_name != req.tool_name:
            raise SeqConflict(
                f"saga {req.saga_id!r} seq {req.call_seq} is not an INTENT of {req.tool_name!r}"
            )
        executed = outcome is not None and outcome.phase is Phase.EXECUTED
        result = read_result(outcome.payload) if executed and outcome else JournaledResult()
        input_json = intent.input if req.by_ref else req.input_json
        # an input the workflow has only as journaled is the INTENT row's text: real or redacted
        missing = result.missing or (
            read_input(input_json).missing if input_json == intent.input else None
        )
        if missing is not None:
            # an undo given markers (or nothing) in place of what the call used would act on
            # data that never existed: it does not run, and the saga is flagged for a human
            raise non_retryable(
                ResultUnavailable(
                    f"the compensation of {req.tool_name!r} (call seq {req.call_seq}) did not "
                    f"run: {missing}; a human must undo the effect"
                )
            )
        return req.model_copy(
            update={
                "input_json": input_json,
                "result": result.value,
                "by_ref": False,
                "result_by_ref": False,
            }
        )

    async def _compensated(self, req: CompensateRequest, done: Draft) -> list[RowRef] | None:
        existing = await self.state.outlast(lambda: self.state.journal.get(req.saga_id, req.seq))
        if existing is None:
            return None
        return await self._found(req, done, existing)

    async def _found(self, req: CompensateRequest, done: Draft, existing: Entry) -> list[RowRef]:
        """The row at the undo's seq, written before this attempt: this undo's, or an error
        (its payload aside: only the attempt that ran the undo knows what a correction returned)."""
        if not existing.same_content(replace(done, payload=existing.payload)):
            raise JournalAhead(
                f"saga {req.saga_id!r} seq {req.seq} holds {existing.tool_name} "
                f"{existing.phase}, not this compensation"
            )
        await self.writes.at_tail(existing)
        # the attempt that wrote it may have died before its checkpoint or seal
        return [_compensated_ref(existing, self.writes.checkpoint(existing, req.seal_as))]

    def _row(
        self, req: CompensateRequest, tool: RegisteredTool, done: Draft, returned: Any
    ) -> Draft:
        """The COMPENSATED row: ``done``, or for a COMPENSATABLE tool, corrected, not restored,
        with what the correction returned."""
        if tool.tool.reversibility is not Reversibility.COMPENSATABLE:
            return done
        try:
            payload = correction_payload(to_jsonable_python(returned, fallback=repr))
        except ValueError as exc:  # NaN or infinity: the undo ran, so its row is still written
            payload = correction_payload(
                {"unserializable_result": repr(returned), "error": str(exc)}
            )
        return self.state.draft(
            req.saga_id, req.tool_name, Phase.COMPENSATED, req.input_json, payload
        )

    async def _undo(self, req: CompensateRequest, tool: RegisteredTool) -> Any:
        """Run the compensation; what it returned (a correction's result, for COMPENSATABLE)."""
        assert tool.compensation is not None
        ctx = CompensationContext(
            saga_id=req.saga_id,
            seq=req.call_seq,
            tool_name=req.tool_name,
            input=json.loads(req.input_json) if req.input_json else {},
            result=req.result,
            attempt=activity.info().attempt,
            failed=req.failed,
        )
        try:
            if inspect.iscoroutinefunction(tool.compensation):
                return await tool.compensation(ctx)
            return await asyncio.to_thread(tool.compensation, ctx)
        except Exception as exc:
            # journaled by the workflow as COMPENSATION_FAILED once the retries run out, or at
            # once when no retry can help
            error = scrubbed(self.state.redactor, req.tool_name, exc)
            if not (error.non_retryable or isinstance(exc, _PERMANENT_UNDO)):
                raise error from None
            raise ApplicationError(
                error.message,
                *error.details,
                undo_attempt_detail(activity.info().attempt),
                type=error.type,
                non_retryable=True,
            ) from None


#: the most of a correction's result handed back to the workflow, in JSON characters (the row
#: keeps all of it; the workflow's history needs only enough for the saga's result)
_CORRECTION_CHARS = 16 * 1024


def _compensated_ref(row: Entry, sealed: bool) -> RowRef:
    """The COMPENSATED row's ref, with what a correction returned, as journaled (redacted)."""
    found = ref(row, sealed=sealed)
    correction = read_correction(row.payload)
    if correction is not None and len(row.payload) <= _CORRECTION_CHARS:
        found.correction = correction.result
    return found
