"""The saga's journal as activities write it: open (claim and page), append at a chosen seq,
checkpoint and seal, and the halt read."""

from __future__ import annotations

import functools
import logging
from datetime import UTC, datetime

from temporalio import activity

from sagacity.errors import (
    EvidenceUnavailable,
    Halted,
    JournalAhead,
    SagaIdTaken,
    SeqConflict,
    SeqTaken,
)
from sagacity.evidence.decisions import Policy
from sagacity.journal import GENESIS_HASH, Draft, Entry, seal
from sagacity.store.opening import claim_with_intent
from sagacity.store.owners import SagaOwner
from sagacity.temporal.activities.notices import halted, not_this_saga, notice
from sagacity.temporal.activities.outcomes import ref
from sagacity.temporal.activities.paging import page_of
from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.activities.tools import catalog, steps_problems
from sagacity.temporal.activities.typed import typed
from sagacity.temporal.models import (
    AppendRequest,
    HaltLookedUp,
    HaltLookup,
    JournalRow,
    RowRef,
    SagaOpen,
    SagaOpened,
    SagaState,
    SealRequest,
)
from sagacity.temporal.names import APPEND, OPEN_SAGA, READ_HALT, SEAL_SAGA

__all__ = ["JournalWrites"]

_log = logging.getLogger(__name__)


class JournalWrites:
    """Every journal write of the activities, each at the seq the workflow chose, so a retried
    or replayed activity finds its own row and moves on instead of writing twice."""

    def __init__(self, state: ActivityState) -> None:
        self.state = state

    @activity.defn(name=OPEN_SAGA)
    @typed
    async def open_saga(self, req: SagaOpen) -> SagaOpened:
        """Claim the saga's journal for this run chain; the catalog and the rows it lacks.

        A new declarative saga's steps are checked first: if any cannot run, nothing is claimed
        and the problems are the answer, so the id stays free for the corrected steps. Unless
        this run chain claimed the journal already (this open replayed on another worker after
        its claim, or the saga reset to its start): its steps were accepted and may have run, so
        it opens, to adopt and compensate what ran, not to end as if nothing had.
        """
        refused = await self._refused_steps(req)
        if refused is not None:
            return refused
        owner = await self._claim(req)
        if owner.claimed_now and req.after_seq == 0:
            return self._opened(req, [], more=False)  # a new saga
        return await self._read(req)

    async def open_in_call(
        self, req: SagaOpen, *, fits: bool, intent: Draft | None = None
    ) -> tuple[SagaOpened, bool, Entry | None]:
        """A new saga's first call opens its journal (``open_saga``'s claim and answer); whether
        the call may go on to its INTENT in the same activity, and that INTENT when written here.

        It may when the journal is new, claimed by this very attempt (INTENT at seq 1 then
        follows a genesis no one wrote after), or on a retry of an attempt that claimed it (the
        call's retry path settles what that attempt left), and when ``fits``: the activity was
        scheduled as the catalog's spec of the tool would schedule it. Otherwise (the run chain
        holds the journal already: a reset, a call held by a halt and started again) the answer
        holds the rows, as ``open_saga``'s would, and the saga calls again knowing them.

        ``intent``: the call's INTENT (its arguments bound), on a first attempt: a new claim
        writes it in the same statement and commit (a round trip and a commit fewer per saga).
        """
        refused = await self._refused_steps(req)
        if refused is not None:
            return refused, False, None
        written = None
        if intent is not None and fits and activity.info().attempt == 1:
            owner, written = await self._claim_with(req, intent)
        else:
            owner = await self._claim(req)
        if (owner.claimed_now or activity.info().attempt > 1) and fits:
            return self._opened(req, [], more=False), True, written
        if owner.claimed_now:
            return self._opened(req, [], more=False), False, None
        return await self._read(req), False, None

    async def _claim_with(self, req: SagaOpen, intent: Draft) -> tuple[SagaOwner, Entry | None]:
        """:meth:`_claim`, writing ``intent`` at seq 1 in the same statement when the claim is
        new (the row, else None)."""
        # sealed once: a try after an outage that took a committed answer finds this very row
        entry = seal(intent, seq=1, prev_hash=GENESIS_HASH, timestamp=datetime.now(UTC))
        try:
            owner, written = await self.state.outlast(
                lambda: claim_with_intent(
                    self.state.journal,
                    entry,
                    workflow_id=req.workflow_id,
                    first_run_id=req.first_run_id,
                    task_queue=activity.info().task_queue,
                )
            )
        except Halted:
            # nothing written, not even the claim: claimed alone, as before a call's INTENT,
            # which the halt then refuses as it refuses any
            return await self._claim(req), None
        return await self._owned(req, owner), written

    async def _refused_steps(self, req: SagaOpen) -> SagaOpened | None:
        """A new declarative saga's steps that cannot run, as the answer (nothing claimed)."""
        if req.steps is None:
            return None
        problems = steps_problems(self.state, req.steps)
        if problems and not await self._claimed_by(req):
            return SagaOpened(tools=[], rows=[], problems=problems)
        return None

    async def _claim(self, req: SagaOpen) -> SagaOwner:
        """Claim the saga's journal for ``req``'s run chain: ``SagaIdTaken`` when another chain
        holds it, or when rows no owner claimed were there first."""
        owner = await self.state.outlast(
            lambda: self.state.journal.claim(
                req.saga_id, workflow_id=req.workflow_id, first_run_id=req.first_run_id
            )
        )
        return await self._owned(req, owner)

    async def _owned(self, req: SagaOpen, owner: SagaOwner) -> SagaOwner:
        """``owner``, the claim's answer, unless another chain holds the saga or rows no owner
        claimed were there first (``SagaIdTaken``)."""
        if owner.first_run_id != req.first_run_id:
            raise SagaIdTaken(
                f"saga id {req.saga_id!r} already names the journal of workflow "
                f"{owner.workflow_id!r} (first run {owner.first_run_id}); one id names one "
                "journal: start this saga under a new id"
            )
        if owner.claimed_now and req.after_seq == 0 and owner.had_rows:
            # rows with no owner: written before ownership was recorded, by another run
            first = await self.state.outlast(
                lambda: self.state.journal.after(req.saga_id, 0, limit=1)
            )
            written = (
                f" (first row written {first[0].timestamp:%Y-%m-%d %H:%M:%S} UTC)" if first else ""
            )
            raise SagaIdTaken(
                f"saga id {req.saga_id!r} already names a journal{written}; "
                "start this saga under a new id"
            )
        return owner

    async def _read(self, req: SagaOpen) -> SagaOpened:
        """The rows after this run's head (which the journal must hold), a page at a time."""
        if req.after_seq > 0:
            held = await self.state.outlast(
                lambda: self.state.journal.get(req.saga_id, req.after_seq)
            )
            if held is None or held.hash != req.after_hash:
                raise SeqConflict(
                    f"saga {req.saga_id!r}: the journal does not hold this run's head "
                    f"(seq {req.after_seq}, {req.after_hash[:12]}…)"
                )
        rows = await self.state.outlast(
            lambda: self.state.journal.after(req.saga_id, req.after_seq, limit=req.limit + 1)
        )
        page = page_of(rows[: req.limit])
        return self._opened(req, page, more=len(rows) > len(page))

    async def _claimed_by(self, req: SagaOpen) -> bool:
        """Whether ``req``'s run chain holds the saga's journal already (read only when its
        steps are refused: the hot path asks nothing more)."""
        chains = await self.state.outlast(lambda: self.state.journal.chains([req.saga_id]))
        chain = chains.get(req.saga_id)
        return chain is not None and chain[1] == req.first_run_id

    def _opened(self, req: SagaOpen, rows: list[JournalRow], *, more: bool) -> SagaOpened:
        """What ``open_saga`` answers: the brief catalog, the rows, whether this worker seals and
        whether the saga shows its state in search attributes.

        A declarative saga's catalog holds only its steps' tools: every saga's history keeps
        the catalog it opened with, and a worker may serve many tools.
        """
        only = None if req.steps is None else {step.tool for step in req.steps}
        return SagaOpened(
            tools=catalog(self.state.tools, brief=True, only=only),
            rows=rows,
            more=more,
            seals=self.state.checkpoints is not None,
            seals_in_calls=self.state.checkpoints is not None,
            seals_reported=True,
            brief=True,
            keyring=self.state.keyring,
            policy=self.state.policy if self.state.policy != Policy() else None,
            visible=activity.info().namespace in self.state.visible_in,
        )

    @activity.defn(name=APPEND)
    @typed
    async def append(self, req: AppendRequest) -> list[RowRef]:
        drafts = []
        for r in req.rows:
            text = r.input
            if r.input_of is not None:
                source = await self.state.outlast(
                    functools.partial(self.state.journal.get, req.saga_id, r.input_of)
                )
                text = source.input if source is not None else ""
            drafts.append(self.state.draft(req.saga_id, r.tool_name, r.phase, text, r.payload))
        try:
            entries = await self.state.outlast(
                lambda: self.state.journal.append_batch_at(
                    drafts, seq=req.seq, prev_hash=req.prev_hash
                )
            )
        except SeqConflict as exc:
            raise JournalAhead(str(exc)) from exc
        await self.at_tail(entries[-1])
        self.checkpoint(entries[-1])
        return [ref(e) for e in entries]

    @activity.defn(name=SEAL_SAGA)
    @typed
    async def seal_saga(self, req: SealRequest) -> bool:
        """Seal the saga's final head with a signed checkpoint; whether a seal was written.

        The journal must end at the head the workflow holds: a row after it (``JournalAhead``),
        or another row there (``SeqConflict``), and nothing is sealed. Without a checkpoint
        writer there is nothing to sign with. Sealing again, after a retry, is harmless.
        """
        if self.state.checkpoints is None:
            return False
        head = await self.state.outlast(lambda: self.state.journal.head(req.saga_id))
        if head is not None and head.seq > req.head.seq:
            raise JournalAhead(
                f"saga {req.saga_id!r} ended at seq {req.head.seq}, but the journal goes on to "
                f"seq {head.seq}: not sealed"
            )
        if head is None or (head.seq, head.hash) != (req.head.seq, req.head.hash):
            raise SeqConflict(
                f"saga {req.saga_id!r} ended at seq {req.head.seq} "
                f"({req.head.hash[:12]}…), which the journal does not end with: not sealed"
            )
        try:
            self.state.checkpoints.seal(req.saga_id, head.seq, head.hash, req.state.value)
        except EvidenceUnavailable as exc:
            # as for any checkpoint: the saga's end stands, and an operator must be told
            _log.error("seal of saga %s at seq %d not written: %s", req.saga_id, head.seq, exc)
            return False
        return True

    @activity.defn(name=READ_HALT)
    @typed
    async def read_halt(self, req: HaltLookup) -> HaltLookedUp:
        """Whether a ``halt`` signal is real and aborts the saga: the halt store's word on that
        halt when it holds it (in force, or lifted), else the signal's own signature checked
        with the worker's keyring; either way its policy must be ``compensate`` and its scope
        take in the saga. Judged here, so replay follows the recorded answer."""
        told = req.told
        stored = await self.state.outlast(lambda: self.state.halts.get(told.halt_id))
        if stored is not None and not stored.active:
            return HaltLookedUp(refusal=f"halt {told.halt_id} is lifted")
        task_queue = activity.info().task_queue
        if stored is not None:
            # the store's own scope decides (the notice drops one too long to pass on)
            covered = stored.scope.tool is None and stored.scope.covers(req.saga_id, "", task_queue)
            if stored.policy != "compensate" or not covered:
                return HaltLookedUp(refusal=not_this_saga(told.halt_id))
            return HaltLookedUp(notice=notice(stored, told.halt_id))
        statement = told.statement()
        if self.state.keyring is None:
            why: str | None = "no keyring to check its signature with"
        elif statement is None:
            why = "it names no scope"
        else:
            why = self.state.keyring.refusal(statement, told.signature)
        if why is not None:
            return HaltLookedUp(
                refusal=f"the halt store holds no such halt, and the signal proves nothing ({why})"
            )
        if told.policy != "compensate" or not told.covers(req.saga_id, task_queue):
            return HaltLookedUp(refusal=not_this_saga(told.halt_id))
        return HaltLookedUp(notice=told)

    async def append_at(
        self,
        draft: Draft,
        *,
        seq: int,
        prev_hash: str,
        exclusive: bool = False,
        anchor: bool = True,
        guarded: bool = False,
    ) -> Entry:
        """Append at ``seq``; a different row there means the journal moved on without us.

        ``anchor``: checkpoint the new head (off for a row the same activity follows with
        another, or seals itself). ``guarded``: a call's INTENT, refused while a halt covers
        it (raised as a non-retryable ``Halted`` the saga waits on).
        """
        task_queue = activity.info().task_queue if guarded else None
        # every try seals the same row: when an outage took the answer of a commit that went
        # through, the next try finds its own row, not "another writer's" (a false SUSPECT)
        at = datetime.now(UTC)
        try:
            entry = await self.state.outlast(
                lambda: self.state.journal.append_at(
                    draft,
                    seq=seq,
                    prev_hash=prev_hash,
                    exclusive=exclusive,
                    task_queue=task_queue,
                    timestamp=at,
                )
            )
        except Halted as exc:
            raise await halted(self.state, exc) from None
        except SeqTaken:
            raise
        except SeqConflict as exc:
            raise JournalAhead(str(exc)) from exc
        if anchor:
            self.checkpoint(entry)
        return entry

    async def at_tail(self, entry: Entry) -> None:
        """A row found already written is ours only if nothing was written after it."""
        head = await self.state.outlast(lambda: self.state.journal.head(entry.saga_id))
        if head is not None and head.seq > entry.seq:
            raise JournalAhead(
                f"saga {entry.saga_id!r}: seq {entry.seq} was written before this run "
                f"(the journal goes on to seq {head.seq})"
            )

    def checkpoint(self, entry: Entry, seal_as: SagaState | None = None) -> bool:
        """Sign ``entry`` as the head, or seal it as the end; whether a seal was written."""
        # the head also lives outside Postgres, signed, so a rewrite or a cut tail shows; a seal
        # is a checkpoint too, that also says no row may follow
        if self.state.checkpoints is None:
            return False
        try:
            if seal_as is None:
                self.state.checkpoints.record(entry.saga_id, entry.seq, entry.hash)
                return False
            self.state.checkpoints.seal(entry.saga_id, entry.seq, entry.hash, seal_as.value)
        except EvidenceUnavailable as exc:
            # the row is written; failing now would make its retry guess what happened. The
            # next row's checkpoint covers this head too.
            _log.error(
                "checkpoint of saga %s seq %d not written: %s", entry.saga_id, entry.seq, exc
            )
            return False
        return True
