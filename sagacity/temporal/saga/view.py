"""The saga's view of its journal: claimed and read (catch-up), folded into the effects it holds.

The journal is the truth. The saga claims its id's journal when it starts (one id, one journal:
a new run under a used id is refused, while a reset, a retry or continue-as-new of the same run
chain continues it), and whenever an activity finds rows it has not seen it re-reads the journal
and goes on from the real head: effects an earlier run left live are adopted, not made twice.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any

from temporalio import workflow
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.evidence.decisions import Policy
from sagacity.evidence.redaction import could_be
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import APPROVAL_GATE, ROLLBACK, Phase
from sagacity.journal.results import read_input, read_result
from sagacity.temporal import names
from sagacity.temporal.checks import steps_refused
from sagacity.temporal.failures import error_message, error_type
from sagacity.temporal.models import (
    STATUS_ROWS,
    Effect,
    Head,
    Journaled,
    JournalRow,
    Original,
    RowRef,
    SagaCarry,
    SagaOpen,
    SagaOpened,
    SagaState,
    Step,
    ToolSpec,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore, loads
from sagacity.temporal.saga.ending import Ending
from sagacity.temporal.saga.patches import (
    ADOPT_REDACTED_PATCH,
    JOURNALED_RESULTS_PATCH,
    OPEN_PATCH,
    RESOLUTION_MARK_PATCH,
    ROLLED_BACK_PATCH,
)
from sagacity.temporal.waits import JOURNAL_RETRY, JOURNAL_TIMEOUT
from sagacity.tools import Reversibility

#: the phases a call's first row can have: it ran, it waited for a human, or it was refused
_OPENING = (Phase.INTENT, Phase.AWAITING_APPROVAL, Phase.REJECTED)


class View:
    """What this run has read of the journal and not yet settled, and how calls are journaled.

    ``unpack``: effects a continued run carries by reference become effects (the catalog is
    known); ``settle``: settle what an earlier run left open (:meth:`take_open_gate`,
    :meth:`take_open_intent`).
    """

    def __init__(
        self,
        core: SagaCore,
        controls: Controls,
        ending: Ending,
        carry: SagaCarry | None,
        *,
        unpack: Callable[[], None],
        settle: Callable[[], Awaitable[None]],
    ) -> None:
        self._core = core
        self._controls = controls
        self._ending = ending
        self._unpack = unpack
        self._settle = settle
        #: effects an earlier run of this saga left live, not yet asked for again by this run
        self._adoptable: list[Effect] = list(carry.adoptable) if carry else []
        #: effects whose journal rows are redacted: what the tool really took and returned, for
        #: the compensation (Effect holds what the journal shows)
        self._originals = {o.call_seq: o for o in carry.originals} if carry else {}
        #: the newest calls whose journal rows are redacted, as journaled, by INTENT seq
        self._views: dict[int, Journaled] = {}
        # journal rows read back but not yet paired: an INTENT and an approval request
        self._open_intent: JournalRow | None = None
        self._open_gate: JournalRow | None = None
        #: an approver's edit approved next: the request's input (what the code proposes); then
        #: by INTENT seq, the calls that ran an edit, and the input their code proposed
        self._edited_from: str | None = None
        self._proposed: dict[int, str] = {}
        #: the journal opens in the saga's first call (``defer_open``), with these steps to check
        self._deferred: list[Step] | None = None

    # -- opening the journal -----------------------------------------------------------------

    async def tools(self, *, described: bool = False) -> dict[str, ToolSpec]:
        """The worker's tool catalog, fetched when the saga opens its journal (kept in history)."""
        core = self._core
        if core.catalog is None:
            await self._open()
        if described and core.brief:
            core.catalog, core.brief = await self._described(), False
        assert core.catalog is not None
        return core.catalog

    async def _described(self) -> dict[str, ToolSpec]:
        """The worker's whole tool catalog, from a local activity (counted while it runs)."""
        with self._controls.local_running():
            specs = await workflow.execute_local_activity(
                names.DESCRIBE_TOOLS,
                result_type=list[ToolSpec],
                start_to_close_timeout=timedelta(seconds=10),
            )
        return {s.name: s for s in specs}

    def defer_open(self, check: list[Step]) -> None:
        """Open the journal in the first call's activity, checking ``check`` first, instead of
        in a local activity now; whatever needs the catalog before that call opens it then."""
        self._deferred = check

    @property
    def opens_in_call(self) -> bool:
        """Whether the saga's journal opens in its next call (the first)."""
        return self._deferred is not None

    def opening(self) -> SagaOpen | None:
        """What the next call's activity opens, when the saga's journal opens in it."""
        if self._deferred is None:
            return None
        info = workflow.info()
        return SagaOpen(
            saga_id=self._core.saga_id,
            workflow_id=info.workflow_id,
            first_run_id=info.first_execution_run_id,
            steps=self._deferred,
        )

    async def opened_in_call(self, opened: SagaOpened) -> None:
        """Take a call's answer to the open it made, as :meth:`catch_up` takes ``open_saga``'s:
        refused steps raise ``StepsInvalid``; rows an earlier run wrote are read and settled."""
        if opened.problems:
            raise steps_refused(opened.problems)
        self._take(opened)
        if opened.more:
            await self.catch_up()  # the rest of the rows, a page at a time
            return
        await self._went_on()

    async def _open(self) -> None:
        if self._deferred is not None:
            # the catalog is wanted before the first call: the journal opens now, as it would
            # have at the start
            problems = await self.catch_up(check=self._deferred)
            if problems:
                raise steps_refused(problems)
            return
        if not workflow.patched(OPEN_PATCH):
            self._core.catalog = await self._described()
            return
        await self.catch_up()

    async def catch_up(
        self, *, check: list[Step] | None = None, after: Head | None = None
    ) -> list[str]:
        """Claim the journal and read what this run has not seen; settle what it left open.

        ``check``: a new declarative saga's steps, checked by the worker in the same local
        activity before it claims anything; what is wrong with them is returned, and then
        nothing was claimed or read. Otherwise returns no problems. ``after``: read after this
        row rather than the head (the INTENT an opening call left at the journal's tail).
        """
        core = self._core
        info = workflow.info()
        while True:
            head, after = after or core.head, None
            try:
                opened: SagaOpened = await self._controls.shielded(
                    workflow.start_local_activity(
                        names.OPEN_SAGA,
                        SagaOpen(
                            saga_id=core.saga_id,
                            workflow_id=info.workflow_id,
                            first_run_id=info.first_execution_run_id,
                            after_seq=head.seq,
                            after_hash=head.hash,
                            steps=check,
                        ),
                        result_type=SagaOpened,
                        start_to_close_timeout=JOURNAL_TIMEOUT,
                        retry_policy=JOURNAL_RETRY,
                    ),
                    local=True,
                )
            except ActivityError as err:
                # the id names another run chain's journal, or this run's head is not in it:
                # nothing can safely run, so the workflow fails, naming why
                raise ApplicationError(
                    error_message(err), type=error_type(err), non_retryable=True
                ) from None
            if opened.problems:
                return opened.problems
            check = None  # checked: the next page's request asks only for rows
            self._take(opened)
            if not opened.more:
                break
        await self._went_on()
        return []

    def _take(self, opened: SagaOpened) -> None:
        """Take an open's answer: the catalog, how the worker seals, keys, the rows."""
        core = self._core
        self._deferred = None
        if core.catalog is None or core.brief:  # a described catalog is kept
            core.catalog, core.brief = {s.name: s for s in opened.tools}, opened.brief
        self._ending.opened(opened)
        core.keyring = opened.keyring
        core.policy = opened.policy or Policy()
        core.visible = opened.visible
        self._unpack()
        self._fold(opened.rows)

    async def _went_on(self) -> None:
        """The journal is read to its end: show the state, settle what an earlier run left."""
        core = self._core
        if core.shown is None:
            # a new saga shows no state until it first waits, compensates or ends (none means
            # running), which saves every saga an upsert; a run that continued as new shows the
            # state it goes on in, whatever the run before it showed
            if workflow.info().continued_run_id is None and core.state is SagaState.RUNNING:
                core.shown = (SagaState.RUNNING, None)
            else:
                core.enter(core.state)
        await self._settle()

    def _fold(self, rows: list[JournalRow]) -> None:
        """Take rows an earlier run (or a lost attempt) wrote into this run's view."""
        for row in rows:
            self._core.track(
                [RowRef(seq=row.seq, tool_name=row.tool_name, phase=row.phase, hash=row.hash)]
            )
            if row.phase is Phase.INTENT:
                self._open_intent = row
                if self._edited_from is not None:
                    self._proposed[row.seq] = self._edited_from
                self._edited_from = None
            elif row.phase in (Phase.EXECUTED, Phase.FAILED):
                intent, self._open_intent = self._open_intent, None
                if intent is None or intent.tool_name != row.tool_name:
                    continue
                body = loads(row.payload)
                failed = row.phase is Phase.FAILED
                if failed and isinstance(body, dict) and body.get("effect") == "none":
                    continue  # failed without any effect: nothing to undo
                result, by_ref = self.from_rows(
                    intent, None if failed else row, None if failed else body
                )
                self.took_effect(
                    row.tool_name,
                    intent.seq,
                    loads(intent.input) or {},
                    result,
                    failed=failed,
                    adoptable=not failed,
                    by_ref=by_ref,
                )
                if row.withheld and not failed:  # too large to read back: undone from the journal
                    self.result_in_journal(intent.seq, loads(intent.input) or {})
            elif row.phase is Phase.COMPENSATED:
                undone = self._effect_for(row)
                if undone is not None:
                    self._core.executed.remove(undone)
                    if undone in self._adoptable:
                        self._adoptable.remove(undone)
            elif row.phase is Phase.AWAITING_APPROVAL:
                self._open_gate = row
            elif row.phase in (Phase.APPROVED, Phase.REJECTED) and row.tool_name == APPROVAL_GATE:
                request, self._open_gate = self._open_gate, None
                # an APPROVED row holding another input than its request's is an approver's
                # edit (a row bound to its request holds none): the call ran with that input
                self._edited_from = None
                if row.phase is Phase.APPROVED and request is not None and row.input:
                    self._edited_from = request.input if row.input != request.input else None
            elif row.tool_name == ROLLBACK and workflow.patched(ROLLED_BACK_PATCH):
                self._controls.rolled_back(row)

    def from_rows(
        self, intent: JournalRow, executed: JournalRow | None, body: Any, withheld: bool = False
    ) -> tuple[Any, bool]:
        """A call another run made, as its rows give it: its result, and whether its undo must
        read the rows, where they lack the real input or result (the undo then does not run:
        ``read_result``). ``body``: the result as sagas from before the patch took it (the
        EXECUTED row's payload as it stands; None for a FAILED call, or none read)."""
        read = read_result(executed.payload) if executed is not None else None
        if executed is not None and read is not None and read.resolved_by is None:
            legacy = read_result(executed.payload, legacy=True)
            if legacy.resolved_by is not None and not workflow.patched(RESOLUTION_MARK_PATCH):
                read = legacy  # histories from before the marker replay as they ran
        lacking = withheld or (read is not None and not read.available)
        lacking = lacking or read_input(intent.input).missing is not None
        unwrapped = read is not None and read.resolved_by is not None
        if not (lacking or unwrapped) or not workflow.patched(JOURNALED_RESULTS_PATCH):
            return body, False
        return (read.value if read.available else read.shown) if read else body, lacking

    def _effect_for(self, row: JournalRow) -> Effect | None:
        for effect in reversed(self._core.executed):
            # an effect carried by reference has no input here; compensations go newest first
            same = effect.by_ref or to_json(effect.input) == row.input
            if effect.tool_name == row.tool_name and same:
                return effect
        return None

    def take_open_gate(self) -> JournalRow | None:
        """The approval request an earlier run left open, to be settled now."""
        gate, self._open_gate = self._open_gate, None
        return gate

    def take_open_intent(self) -> JournalRow | None:
        """The call an earlier run left without an outcome, to be settled now."""
        intent, self._open_intent = self._open_intent, None
        return intent

    # -- effects -------------------------------------------------------------------------------

    def took_effect(
        self,
        tool: str,
        call_seq: int,
        args: dict[str, Any],
        result: Any,
        *,
        failed: bool = False,
        adoptable: bool = False,
        journaled: Journaled | None = None,
        by_ref: bool = False,
    ) -> None:
        """Remember a call that took effect (or may have), to undo it if the saga fails.

        ``journaled``: the call as its redacted rows hold it, which the effect shows; the
        original ``args`` and ``result`` are kept apart for the compensation. ``by_ref``: the
        compensation reads input and result from the journal (``args`` and ``result`` are as
        journaled, and not the real ones).
        """
        spec = (self._core.catalog or {}).get(tool)
        if journaled is not None:
            self._originals[call_seq] = Original(call_seq=call_seq, input=args, result=result)
        effect = Effect(
            tool_name=tool,
            call_seq=call_seq,
            reversibility=spec.reversibility if spec else Reversibility.IRREVERSIBLE,
            input=journaled.input if journaled else args,
            result=journaled.result if journaled else result,
            failed=failed,
            by_ref=by_ref,
        )
        self._core.executed.append(effect)
        if adoptable:
            self._adoptable.append(effect)

    def adopt(self, tool: str, args: dict[str, Any], input_json: str) -> Original | None:
        """An effect an earlier run left live for this very call: it is not made twice."""
        for effect in self._adoptable:
            if effect.tool_name != tool:
                continue
            made = self._originals.get(effect.call_seq) or Original(
                call_seq=effect.call_seq, input=effect.input, result=effect.result
            )
            # read back from the journal, a redacted input shows markers where the call has
            # values: the call is the same if everything else is
            same = to_json(made.input) == input_json or (
                effect.call_seq not in self._originals
                and could_be(made.input, args)
                and workflow.patched(ADOPT_REDACTED_PATCH)
            )
            # a call an approver edited ran other arguments than this run's code proposes: it
            # is the same call if the request proposed these (no patch: only a journal with an
            # edited approval, new on the wire, has such a call)
            proposed = self._proposed.get(effect.call_seq)
            if not same and proposed is not None:
                same = proposed == input_json or could_be(loads(proposed) or {}, args)
            if same:
                self._adoptable.remove(effect)
                if effect.by_ref and effect.call_seq not in self._originals:
                    # the call's real input is known now; its result is still the journal's
                    self.result_in_journal(effect.call_seq, args)
                return made
        return None

    def no_more_adoptions(self) -> None:
        """The saga compensated: nothing an earlier run left live is taken up any more."""
        self._adoptable = []

    def adoptable(self) -> list[Effect]:
        return self._adoptable

    def result_in_journal(self, call_seq: int, args: dict[str, Any]) -> None:
        """The call at ``call_seq`` is undone with ``args`` and the result the journal holds."""
        self._originals[call_seq] = Original(call_seq=call_seq, input=args, result_in_journal=True)

    def original(self, call_seq: int) -> Original | None:
        """What the call at ``call_seq`` really took and returned, where its rows are redacted."""
        return self._originals.get(call_seq)

    def originals(self, effects: list[Effect]) -> list[Original]:
        return [o for e in effects if (o := self._originals.get(e.call_seq)) is not None]

    # -- how calls are journaled ---------------------------------------------------------------

    def last_call_seq(self, tool: str) -> int | None:
        """The seq of the row that opened ``tool``'s newest call, or None."""
        # asked as soon as the call returns: rows only change when an activity completes, in a
        # later workflow activation, so the newest such row is this call's, even with sibling
        # calls of a parallel agent turn waiting their turn
        for row in reversed(self._core.rows):
            if row.tool_name == tool and row.phase in _OPENING:
                return row.seq
        return None

    def journaled(self, call_seq: int | None) -> Journaled | None:
        """How the journal holds the call at ``call_seq`` when redaction changed it."""
        return self._views.get(call_seq) if call_seq is not None else None

    def note_view(self, call_seq: int, journaled: Journaled | None) -> None:
        if journaled is None:
            return
        self._views[call_seq] = journaled
        if len(self._views) > STATUS_ROWS:  # asked for right after the call: the newest do
            del self._views[next(iter(self._views))]
