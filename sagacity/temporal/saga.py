"""The workflow-side saga engine: decides seqs, gates, and what to compensate; activities do the I/O.

Use it inside any ``@workflow.defn``::

    saga = Saga()
    result = await saga.run(lambda: place_order(saga))

It registers the saga's signals (``abort``, ``approve``, ``reject``, ``resolve``), its update
(``decide``) and its queries (``status``) on the running workflow. Everything here is
deterministic: no I/O, clocks or randomness outside Temporal's APIs.

The journal is the truth. The saga claims its id's journal when it starts (one id, one journal:
a new run under a used id is refused, while a reset, a retry or continue-as-new of the same run
chain continues it), and whenever an activity finds rows it has not seen it re-reads the journal
and goes on from the real head. A Temporal cancel is an abort: compensation runs, shielded from
the cancellation.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import weakref
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal, NoReturn, ParamSpec, TypeVar, get_args, get_origin, overload

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import PydanticSerializationError, to_jsonable_python
from temporalio import workflow
from temporalio.common import RawValue, RetryPolicy
from temporalio.exceptions import ActivityError, ApplicationError

from sagacity.errors import (
    ApprovalRejected,
    SagaAborted,
    SagaCancelled,
    SagacityError,
    ToolArgumentsInvalid,
    ToolFailed,
    UnknownTool,
)
from sagacity.evidence.decisions import Keyring, Policy, Signature, Statement, allowed, signed_row
from sagacity.evidence.redaction import could_be
from sagacity.journal.canonical import to_json
from sagacity.journal.phases import APPROVAL_GATE, ROLLBACK, SUPERSEDED, Phase
from sagacity.journal.results import read_input, read_result, resolution_payload
from sagacity.temporal import decode, limits, names, visibility
from sagacity.temporal.failures import (
    compensation_failure,
    error_message,
    error_type,
    halt_notice,
)
from sagacity.temporal.models import (
    RESULT_EFFECTS,
    STATUS_ROWS,
    Abort,
    AppendRequest,
    ApprovalClose,
    ApprovalOpen,
    ApprovalOpened,
    Approve,
    CallOutcome,
    CallRequest,
    CallStatus,
    CompensateRequest,
    Compensating,
    Decision,
    Effect,
    EffectRefs,
    ErrorInfo,
    HaltLookedUp,
    HaltLookup,
    HaltNotice,
    Head,
    Journaled,
    JournalRow,
    Original,
    PendingApproval,
    Reject,
    Resolve,
    Resolved,
    ResolveRequest,
    Resume,
    RowDraft,
    RowRef,
    SagaCarry,
    SagaOpen,
    SagaOpened,
    SagaOptions,
    SagaResult,
    SagaState,
    SagaStatus,
    SealRequest,
    Suspect,
    ToolSpec,
    failure_payload,
    resolution_statement,
)
from sagacity.tools import CompensableTool, MethodTool, Reversibility

P = ParamSpec("P")
T = TypeVar("T")
M = TypeVar("M", bound=BaseModel)

#: why a decision was refused, as an update caller finds it in the error's first detail
RefusalKind = Literal[
    "no_approver",
    "already_decided",
    "not_waiting",
    "unknown_seq",
    "input_hash_mismatch",
    "not_allowed",
    "unsigned",
    "bad_signature",
    "invalid",
]

#: Patch markers (see docs/versioning.md): sagas whose history predates a marker replay the old
#: behaviour; new sagas take the new one.
OPEN_PATCH = "sagacity-open-saga"
#: sagas from before this marker made again a call whose effect they read back from a redacted
#: journal row (after a reset): the row could not equal the call's real input
ADOPT_REDACTED_PATCH = "sagacity-adopt-redacted"
#: sagas from before this marker journaled an abort during an approval wait as a plain rejection
#: (``{"by", "reason"}``, ``by`` as the sender claimed it)
ABORT_ROW_PATCH = "sagacity-abort-row"
#: sagas from before this marker journaled a decision row with the input the workflow holds
#: (redacted by the approval gate's rules rather than copied from the request), and an abort's
#: row with the signing key's id only, not the signature that proves it
BOUND_ROWS_PATCH = "sagacity-decision-rows-bound"
#: sagas from before this marker obeyed any ``halt`` signal with policy ``compensate``, unproven,
#: in the name it gave, and also while they compensated after a failure
HALT_CHECK_PATCH = "sagacity-halt-checked"
#: sagas from before this marker took a result read back from the journal as it stood: a
#: resolution's ``{"resolved_by", "result"}`` for the result, markers in place of the values
JOURNALED_RESULTS_PATCH = "sagacity-journaled-results"
#: sagas from before this marker ran the calls queued behind the lock (parallel tool calls)
#: when the saga began to compensate meanwhile, only to undo them
QUEUED_CALLS_PATCH = "sagacity-no-calls-once-compensating"
#: sagas from before this marker scheduled a call whatever the size of its arguments (one over
#: Temporal's limits failed the workflow task for ever); marked only when a call is refused
PAYLOAD_LIMIT_PATCH = "sagacity-payload-limit"
#: sagas from before this marker judged a ``decide`` update in its validator: a refused one was
#: not recorded in ``refused_decisions``; now the handler judges it, records a refusal and fails
DECIDE_RECORDED_PATCH = "sagacity-decide-recorded"
#: sagas from before this marker went on past a rollback's row (a reset of a rolled-back run):
#: they made calls again, on effects the rollback had undone
ROLLED_BACK_PATCH = "sagacity-rolled-back-ends"
#: sagas from before this marker read an unsigned {"resolved_by", "result"} row another run
#: wrote as a resolution; resolutions now carry "$resolution", and that shape is a tool's result
RESOLUTION_MARK_PATCH = "sagacity-resolution-marked"

#: how long a held saga waits before it looks at its halt again, doubling up to the maximum
_HALT_RECHECK = timedelta(seconds=30)
# one look costs about a dozen history events: hourly, a held saga's history lasts half a year
_HALT_RECHECK_MAX = timedelta(hours=1)

#: who a Temporal cancel is journaled as
CANCELLED_BY = "temporal-cancel"

# Activities inside wait out a database outage (``SagaActivities.outage_window``, 10 minutes by
# default); their own time limit leaves room for it. A dead worker is noticed by heartbeats.
_OUTAGE_ALLOWANCE = timedelta(minutes=15)
_JOURNAL_TIMEOUT = _OUTAGE_ALLOWANCE
# Journal writes wait out a database outage rather than drop a row.
_JOURNAL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
#: the phases a call's first row can have: it ran, it waited for a human, or it was refused
_OPENING = (Phase.INTENT, Phase.AWAITING_APPROVAL, Phase.REJECTED)
# activity error types that mean "the journal holds rows this run has not seen"
_AHEAD = frozenset({"JournalAhead", "SeqConflict", "SeqTaken"})
#: activity error types of a call the worker refused before its INTENT: the tool never ran
_REFUSED_BEFORE_INTENT = frozenset({"ToolArgumentsInvalid", "UnknownTool"})


class _Desync(Exception):
    """An activity found the journal ahead of this run: re-read it, then try again."""


def _validated(model: type[M], payloads: tuple[Any, ...]) -> M | str:
    """A signal's or update's one payload as ``model``, or what is wrong with it."""
    if len(payloads) != 1:
        return f"{len(payloads)} arguments, not 1"
    try:
        return model.model_validate(payloads[0])
    except ValidationError as exc:
        return _problems(exc)


def _sender(payloads: tuple[Any, ...]) -> str:
    """Who a decision's payload names as its sender, when it names one legibly; else ``?``."""
    fields = payloads[0] if len(payloads) == 1 and isinstance(payloads[0], dict) else {}
    who = fields.get("approver") or fields.get("resolver") or fields.get("by")
    return who[:200] if isinstance(who, str) and who.isprintable() else "?"


def _problems(exc: ValidationError) -> str:
    return "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(payload)'}: {e['msg']}" for e in exc.errors()
    )


def _halt_abort(notice: HaltNotice) -> Abort:
    return Abort(reason=f"halted: {notice.describe()}"[:2000], by=notice.operator)


def _loads(text: str) -> Any:
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


@dataclass(frozen=True, slots=True)
class _ToolTyping:
    """How a typed call binds a tool's positional arguments and converts its result."""

    signature: inspect.Signature
    #: None when the tool's return annotation is missing or Any: the JSON data as it came
    result: TypeAdapter[Any] | None


# one per tool object: TypeAdapters are costly to build. Weak, so a tools module a sandboxed
# workflow imports afresh in each run does not keep every run's tools alive.
_TYPINGS: weakref.WeakKeyDictionary[CompensableTool[..., Any], _ToolTyping] = (
    weakref.WeakKeyDictionary()
)


def _typing(tool: CompensableTool[..., Any]) -> _ToolTyping:
    cached = _TYPINGS.get(tool)
    if cached is None:
        signature = inspect.signature(tool.fn, eval_str=True)
        if isinstance(tool, MethodTool):
            # named from its class: the worker's tool is bound to the app's instance
            signature = signature.replace(parameters=list(signature.parameters.values())[1:])
        returns = signature.return_annotation
        if get_origin(returns) in (Awaitable, Coroutine):
            # a sync function handing back an awaitable: the activity awaits it
            returns = get_args(returns)[-1]
        adapter = None if returns in (signature.empty, Any) else TypeAdapter(returns)
        cached = _TYPINGS[tool] = _ToolTyping(signature, adapter)
    return cached


def _named_call(
    tool: str | CompensableTool[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """The tool's name and its arguments by name, as JSON data: what the journal records and
    the worker binds either way. :class:`ToolArgumentsInvalid` (the saga compensates) for what
    no call can take, rather than a workflow task that fails until someone terminates it."""
    if isinstance(tool, str):
        if args:
            raise ToolArgumentsInvalid(
                f"tool {tool!r} is named by string: pass its arguments by keyword, or pass "
                "the tool itself"
            )
        return tool, _json_arguments(tool, kwargs)
    if not isinstance(tool, CompensableTool):
        raise ToolArgumentsInvalid(
            f"saga.call takes a declared tool (@compensable) or a tool's name, not {tool!r}"
        )
    # before the call runs: a return type pydantic cannot convert fails the workflow task
    # (which waits for a fixed worker) while the call has had no effect yet
    typing = _typing(tool)
    if not args:
        return tool.name, _json_arguments(tool.name, kwargs)
    try:
        bound = typing.signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise ToolArgumentsInvalid(
            f"arguments for tool {tool.name!r} do not match its signature: {exc}"
        ) from None
    return tool.name, _json_arguments(tool.name, dict(bound.arguments))


def _origin(tool: str | CompensableTool[..., Any]) -> str | None:
    """Which function a typed call names (None for a tool named by string)."""
    return None if isinstance(tool, str) else tool.origin


def _json_arguments(name: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` as JSON data: a pydantic model, a dataclass or a date given to a typed tool
    becomes the JSON the worker validates back into it (plain JSON data is left as it is)."""
    try:
        data: dict[str, Any] = to_jsonable_python(args)
    except PydanticSerializationError as exc:
        raise ToolArgumentsInvalid(
            f"arguments for tool {name!r} cannot be journaled as JSON: {exc}"
        ) from None
    return data


def _typed_result(tool: str | CompensableTool[..., Any], result: Any) -> Any:
    """A typed call's JSON result as the tool's annotated return type (a model, a dataclass…)."""
    if isinstance(tool, str):
        return result
    adapter = _typing(tool).result
    if adapter is None:
        return result
    try:
        return adapter.validate_python(result)
    except ValidationError as exc:
        # the call took effect (it is compensated); its result, as the worker gave it back or
        # a human resolved it, is not what the workflow was promised
        raise ToolFailed(
            tool.name, "ResultInvalid", f"result does not match its return type: {_problems(exc)}"
        ) from None


class Saga:
    """One saga's journal head, executed effects and human decisions, inside a workflow."""

    def __init__(
        self,
        options: SagaOptions | None = None,
        *,
        saga_id: str | None = None,
        carry: SagaCarry | None = None,
    ) -> None:
        self.saga_id = carry.saga_id if carry else saga_id or workflow.info().workflow_id
        self.options = options or SagaOptions()
        self.state = SagaState.RUNNING
        self.head = Head()
        #: the newest rows (at most STATUS_ROWS)
        self.rows: list[RowRef] = []
        self.executed: list[Effect] = []
        #: tool failures seen, even those the caller caught and carried on from
        self.failures: list[ErrorInfo] = []
        self.needs_attention: str | None = None
        self._lock = asyncio.Lock()
        self._catalog: dict[str, ToolSpec] | None = None
        #: whether the worker seals ended sagas, and does so in the activity that writes the last
        #: row, as ``open_saga`` recorded it in the history
        self._seals = False
        self._seals_in_calls = False
        self._seals_reported = False
        #: checkpoint the next call's INTENT: the head it follows is sealed, or another run's
        self._anchor_next = False
        #: the saga is ending: the next call (``call_last``) or compensation may be its last row
        self._ending = False
        #: the saga chose to compensate: no call that has not started yet may start
        self._compensating = False
        #: the head and state an activity sealed as the saga's end
        self._sealed: tuple[int, SagaState] | None = None
        #: the saga shows its state in search attributes, as ``open_saga`` recorded it, and what
        #: it shows now (state, waiting tool)
        self._visible = False
        self._shown: tuple[SagaState, str | None] | None = None
        #: the catalog lacks descriptions and schemas (see :meth:`tools`)
        self._brief = False
        self._abort: Abort | None = None
        #: the abort came as a signal (its sender is checked), not from a cancel or a halt
        self._abort_signalled = False
        #: the operator's halt the saga aborts for (its signature proves who halted)
        self._abort_halt: HaltNotice | None = None
        #: halt signals being checked against the halt store
        self._halt_lookups: set[asyncio.Task[None]] = set()
        self._cancelled = False
        #: the operator's halt the saga waits on, and how many ``resume`` signals came so far
        self._halt: HaltNotice | None = None
        self._resumes = 0
        #: looks at a halt since the last resume: the wait between them doubles
        self._halt_looks = 0
        self._pending: PendingApproval | None = None
        self._decision: Approve | Reject | None = None
        #: the approval the next call runs under: its approver and signature go to the worker
        self._approval: Approve | None = None
        #: the worker's keyring and policy, as ``open_saga`` recorded them in the history
        self._keyring: Keyring | None = None
        self._policy = Policy()
        #: the seq of the approval request being opened, and decisions that arrived meanwhile
        self._opening: int | None = None
        self._early_decisions: list[tuple[Approve | Reject, str | None]] = []
        self._decided: set[int] = set()
        self._refused: list[str] = []
        self._suspect: Suspect | None = None
        self._resolution: Resolve | None = None
        self._early_resolution: Resolve | None = None
        self._running: str | None = None
        #: the effect whose compensation runs now, for the status query
        self._undoing: Effect | None = None
        self._approved_input_hash: str | None = None
        self._approved_request_hash: str | None = None
        #: effects an earlier run of this saga left live, not yet asked for again by this run
        self._adoptable: list[Effect] = []
        # set once the saga compensates: why, and how far it got (carried by continue-as-new)
        self._carried: SagaCarry | None = None
        self._error: ErrorInfo | None = None
        self._compensated: list[Effect] = []
        self._compensation_failed: list[Effect] = []
        self._live: list[Effect] = []
        #: effects whose journal rows are redacted: what the tool really took and returned, for
        #: the compensation (Effect holds what the journal shows)
        self._originals: dict[int, Original] = {}
        #: the newest calls whose journal rows are redacted, as journaled, by INTENT seq
        self._views: dict[int, Journaled] = {}
        # journal rows read back but not yet paired: an INTENT and an approval request
        self._open_intent: JournalRow | None = None
        self._open_gate: JournalRow | None = None
        if carry is not None:
            self._take_carry(carry)
        # the saga's signals and its update take their payloads raw, decoded by its own code
        # (see _on_signal); a handler the workflow itself registered by name comes first, and
        # the saga takes the workflow's dynamic handlers (names it does not take are refused)
        self._signals: dict[str, Callable[..., None]] = {
            "abort": self._on_abort,
            "approve": self._on_approve,
            "reject": self._on_reject,
            "resolve": self._on_resolve,
            "halt": self._on_halt,
            "resume": self._on_resume,
        }
        workflow.set_dynamic_signal_handler(self._on_signal)
        workflow.set_dynamic_update_handler(self._on_update, validator=self._validate_update)
        workflow.set_query_handler("status", self.status)

    # -- continue-as-new ---------------------------------------------------------------------

    def _take_carry(self, carry: SagaCarry) -> None:
        self.head = carry.head
        self.rows = list(carry.rows)
        # effects travel by reference; they become Effects once the catalog is known
        self._carried = carry
        self._adoptable = list(carry.adoptable)
        self.failures = list(carry.failures)
        self.needs_attention = carry.needs_attention
        self._refused = list(carry.refused)
        self._decided = set(carry.decided)
        self._abort = carry.abort
        self._abort_signalled = carry.abort_signalled
        self._cancelled = carry.cancelled
        self._abort_halt = carry.abort_halt
        self._error = carry.error
        self._originals = {o.call_seq: o for o in carry.originals}

    def carry(self) -> SagaCarry:
        """The state the next run needs (head, effects, failures, decisions) to go on as this one.

        Take it between calls, never while one runs: ``workflow.continue_as_new`` with it and
        ``Saga(carry=...)`` in the new run continue the same journal.
        """
        return SagaCarry(
            saga_id=self.saga_id,
            head=self.head,
            rows=self.rows,
            executed=EffectRefs.of(self.executed),
            adoptable=self._adoptable,
            failures=self.failures,
            needs_attention=self.needs_attention,
            refused=self._refused,
            decided=sorted(self._decided),
            abort=self._abort,
            abort_signalled=self._abort_signalled,
            cancelled=self._cancelled,
            abort_halt=self._abort_halt,
            error=self._error,
            compensated=EffectRefs.of(self._compensated),
            compensation_failed=EffectRefs.of(self._compensation_failed),
            live=EffectRefs.of(self._live),
            originals=[
                o for e in self.executed if (o := self._originals.get(e.call_seq)) is not None
            ],
        )

    def _unpack_carry(self) -> None:
        carry, self._carried = self._carried, None
        if carry is None:
            return
        kinds = {name: spec.reversibility for name, spec in (self._catalog or {}).items()}
        self.executed = carry.executed.effects(kinds)
        self._compensated = carry.compensated.effects(kinds)
        self._compensation_failed = carry.compensation_failed.effects(kinds)
        self._live = carry.live.effects(kinds)

    def continue_as_new_suggested(self) -> bool:
        """Whether history is long enough that the workflow should continue as new now."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.options.continue_as_new_events
        )

    # -- opening the journal -----------------------------------------------------------------

    async def tools(self, *, described: bool = False) -> dict[str, ToolSpec]:
        """The worker's tool catalog, fetched when the saga opens its journal (kept in history).

        ``described``: with each tool's description and parameter schema, what an agent shows
        its model. A saga opens with the brief catalog, so asking costs one more local activity.
        """
        if self._catalog is None:
            await self._open()
        if described and self._brief:
            specs = await workflow.execute_local_activity(
                names.DESCRIBE_TOOLS,
                result_type=list[ToolSpec],
                start_to_close_timeout=timedelta(seconds=10),
            )
            self._catalog, self._brief = {s.name: s for s in specs}, False
        assert self._catalog is not None
        return self._catalog

    async def _open(self) -> None:
        if not workflow.patched(OPEN_PATCH):
            specs = await workflow.execute_local_activity(
                names.DESCRIBE_TOOLS,
                result_type=list[ToolSpec],
                start_to_close_timeout=timedelta(seconds=10),
            )
            self._catalog = {s.name: s for s in specs}
            return
        await self._catch_up()

    async def _catch_up(self) -> None:
        """Claim the journal and read what this run has not seen; settle what it left open."""
        info = workflow.info()
        while True:
            try:
                opened: SagaOpened = await self._shielded(
                    workflow.start_local_activity(
                        names.OPEN_SAGA,
                        SagaOpen(
                            saga_id=self.saga_id,
                            workflow_id=info.workflow_id,
                            first_run_id=info.first_execution_run_id,
                            after_seq=self.head.seq,
                            after_hash=self.head.hash,
                        ),
                        result_type=SagaOpened,
                        start_to_close_timeout=_JOURNAL_TIMEOUT,
                        retry_policy=_JOURNAL_RETRY,
                    )
                )
            except ActivityError as err:
                # the id names another run chain's journal, or this run's head is not in it:
                # nothing can safely run, so the workflow fails, naming why
                raise ApplicationError(
                    error_message(err), type=error_type(err), non_retryable=True
                ) from None
            if self._catalog is None or self._brief:  # a described catalog is kept
                self._catalog, self._brief = {s.name: s for s in opened.tools}, opened.brief
            self._seals, self._seals_in_calls = opened.seals, opened.seals_in_calls
            self._seals_reported = opened.seals_reported
            # rows another run wrote: the next call's INTENT is checkpointed, lifting a seal
            self._anchor_next = self._anchor_next or bool(opened.rows)
            self._keyring = opened.keyring
            self._policy = opened.policy or Policy()
            self._visible = opened.visible
            self._unpack_carry()
            self._fold(opened.rows)
            if not opened.more:
                break
        if self._shown is None:
            # a new saga shows no state until it first waits, compensates or ends (none means
            # running), which saves every saga an upsert; a run that continued as new shows the
            # state it goes on in, whatever the run before it showed
            if workflow.info().continued_run_id is None and self.state is SagaState.RUNNING:
                self._shown = (SagaState.RUNNING, None)
            else:
                self._enter(self.state)
        await self._settle_left_open()

    def _fold(self, rows: list[JournalRow]) -> None:
        """Take rows an earlier run (or a lost attempt) wrote into this run's view."""
        for row in rows:
            self._track(
                [RowRef(seq=row.seq, tool_name=row.tool_name, phase=row.phase, hash=row.hash)]
            )
            if row.phase is Phase.INTENT:
                self._open_intent = row
            elif row.phase in (Phase.EXECUTED, Phase.FAILED):
                intent, self._open_intent = self._open_intent, None
                if intent is None or intent.tool_name != row.tool_name:
                    continue
                body = _loads(row.payload)
                failed = row.phase is Phase.FAILED
                if failed and isinstance(body, dict) and body.get("effect") == "none":
                    continue  # failed without any effect: nothing to undo
                result, by_ref = self._from_rows(
                    intent, None if failed else row, None if failed else body
                )
                self._took_effect(
                    row.tool_name,
                    intent.seq,
                    _loads(intent.input) or {},
                    result,
                    failed=failed,
                    adoptable=not failed,
                    by_ref=by_ref,
                )
                if row.withheld and not failed:  # too large to read back: undone from the journal
                    self._originals[intent.seq] = Original(
                        call_seq=intent.seq,
                        input=_loads(intent.input) or {},
                        result_in_journal=True,
                    )
            elif row.phase is Phase.COMPENSATED:
                undone = self._effect_for(row)
                if undone is not None:
                    self.executed.remove(undone)
                    if undone in self._adoptable:
                        self._adoptable.remove(undone)
            elif row.phase is Phase.AWAITING_APPROVAL:
                self._open_gate = row
            elif row.phase in (Phase.APPROVED, Phase.REJECTED) and row.tool_name == APPROVAL_GATE:
                self._open_gate = None
            elif row.tool_name == ROLLBACK and workflow.patched(ROLLED_BACK_PATCH):
                self._rolled_back(row)

    def _rolled_back(self, row: JournalRow) -> None:
        """An operator rolled the saga back (``sagacity saga rollback``) after an earlier run
        ended unfinished, and this run (a reset) reads it: it makes no call and ends aborted,
        naming the rollback; undoing is the rollback's, which owns the effects it found live."""
        body = _loads(row.payload)
        who = str(body.get("by") or "?") if isinstance(body, dict) else "?"
        who = "".join(c for c in who[:200] if c.isprintable())  # a valid reason, whatever it held
        if self._abort is None or self._abort.by != ROLLBACK:
            self._abort = Abort(
                reason=f"the saga was rolled back by {who} (journal seq {row.seq}); a "
                "rolled-back saga makes no further call",
                by=ROLLBACK,
            )

    @property
    def _left_to_rollback(self) -> bool:
        """Whether this run ends because the saga was rolled back: its live effects are the
        rollback's to undo, not this run's (two undos of one effect could both run)."""
        return self._abort is not None and self._abort.by == ROLLBACK

    def _from_rows(
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
        for effect in reversed(self.executed):
            # an effect carried by reference has no input here; compensations go newest first
            same = effect.by_ref or to_json(effect.input) == row.input
            if effect.tool_name == row.tool_name and same:
                return effect
        return None

    async def _settle_left_open(self) -> None:
        """A call or an approval request an earlier run left open is settled before going on."""
        gate, self._open_gate = self._open_gate, None
        if gate is not None:
            # nobody decided it and the run that asked is gone; this run asks again if it must
            await self._append(
                [
                    RowDraft(
                        tool_name=APPROVAL_GATE,
                        phase=Phase.REJECTED,
                        input=gate.input,
                        payload=to_json(
                            {"by": "sagacity", "reason": SUPERSEDED + "the run that asked ended"}
                        ),
                    )
                ]
            )
            await self._close_request(gate.seq)
        intent, self._open_intent = self._open_intent, None
        if intent is not None:
            outcome = await self._resolve_suspect(
                intent.tool_name,
                intent.seq,
                intent.hash,
                intent.input,
                "an earlier run of this saga left this call without an outcome",
            )
            if outcome.status is CallStatus.EXECUTED:
                # the input is the INTENT row's (the run that had the real one is gone), the
                # result the human's or the one another attempt wrote: where either is not
                # real, the undo reads the rows, which say why it cannot run
                journaled = outcome.journaled
                _, by_ref = self._from_rows(intent, None, None, outcome.result_withheld)
                self._took_effect(
                    intent.tool_name,
                    intent.seq,
                    _loads(intent.input) or {},
                    journaled.result if by_ref and journaled else outcome.result,
                    adoptable=True,
                    journaled=None if by_ref else journaled,
                    by_ref=by_ref,
                )

    def _took_effect(
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
        spec = (self._catalog or {}).get(tool)
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
        self.executed.append(effect)
        if adoptable:
            self._adoptable.append(effect)

    def _adopt(self, tool: str, args: dict[str, Any], input_json: str) -> Original | None:
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
            if same:
                self._adoptable.remove(effect)
                if effect.by_ref and effect.call_seq not in self._originals:
                    # the call's real input is known now; its result is still the journal's
                    self._originals[effect.call_seq] = Original(
                        call_seq=effect.call_seq, input=args, result_in_journal=True
                    )
                return made
        return None

    def last_call_seq(self, tool: str) -> int | None:
        """The seq of the row that opened ``tool``'s newest call (INTENT; AWAITING_APPROVAL or
        REJECTED when it never ran), or None."""
        # asked as soon as the call returns: rows only change when an activity completes, in a
        # later workflow activation, so the newest such row is this call's, even with sibling
        # calls of a parallel agent turn waiting their turn
        for row in reversed(self.rows):
            if row.tool_name == tool and row.phase in _OPENING:
                return row.seq
        return None

    def journaled(self, call_seq: int | None) -> Journaled | None:
        """How the journal holds the call at ``call_seq`` when redaction changed it (None when it
        did not): what to show of a call that just returned, its secrets redacted."""
        return self._views.get(call_seq) if call_seq is not None else None

    def _note_view(self, call_seq: int, journaled: Journaled | None) -> None:
        if journaled is None:
            return
        self._views[call_seq] = journaled
        if len(self._views) > STATUS_ROWS:  # asked for right after the call: the newest do
            del self._views[next(iter(self._views))]

    # -- cancellation ------------------------------------------------------------------------

    async def _shielded(self, awaitable: Awaitable[T]) -> T:
        """Await an activity that a Temporal cancel must not interrupt; the cancel aborts.

        Give it the handle of a started activity (a task already): nothing more is created.
        """
        task = asyncio.ensure_future(awaitable)
        while True:
            try:
                return await asyncio.shield(task)
            except asyncio.CancelledError:
                if task.cancelled():
                    raise
                self._cancel_requested()

    async def _wait(self, condition: Callable[[], bool], timeout: timedelta | None = None) -> None:
        """``wait_condition`` where a Temporal cancel aborts the saga instead of ending it."""
        while True:
            try:
                await workflow.wait_condition(condition, timeout=timeout)
                return
            except asyncio.CancelledError:
                self._cancel_requested()
                if condition():
                    return

    def _cancel_requested(self) -> None:
        self._cancelled = True
        if self._abort is None:
            self._abort = Abort(reason="cancelled through Temporal", by=CANCELLED_BY)

    # -- tool calls ----------------------------------------------------------------------------

    @overload
    async def call(
        self,
        tool: MethodTool[Any, P, Coroutine[Any, Any, T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T: ...
    @overload
    async def call(
        self, tool: MethodTool[Any, P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call(
        self, tool: CompensableTool[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call(
        self, tool: CompensableTool[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call(
        self, tool: CompensableTool[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call(self, tool: str, /, **args: Any) -> Any: ...
    async def call(
        self, tool: str | CompensableTool[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """Run one tool call under the journal; returns its result or raises :class:`ToolFailed`.

        ``tool`` is the declared tool (``saga.call(book_flight, traveler="Ada")``: arguments
        checked by mypy, the result converted to the function's return annotation) or its name
        (the result as JSON data). Calls are serialized so each saga's journal order is the
        order of execution.
        """
        name, named = _named_call(tool, args, kwargs)
        async with self._lock:
            result = await self._call_locked(name, named, _origin(tool))
        return _typed_result(tool, result)

    @overload
    async def call_last(
        self,
        tool: MethodTool[Any, P, Coroutine[Any, Any, T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T: ...
    @overload
    async def call_last(
        self, tool: MethodTool[Any, P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call_last(
        self, tool: CompensableTool[P, Coroutine[Any, Any, T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call_last(
        self, tool: CompensableTool[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call_last(
        self, tool: CompensableTool[P, T], /, *args: P.args, **kwargs: P.kwargs
    ) -> T: ...
    @overload
    async def call_last(self, tool: str, /, **args: Any) -> Any: ...
    async def call_last(
        self, tool: str | CompensableTool[..., Any], /, *args: Any, **kwargs: Any
    ) -> Any:
        """:meth:`call` for the body's last call: when it executes, its activity seals the end.

        The saga then ends without the local activity that seals it otherwise. A call after
        this one is still journaled and sealed correctly: the later end seals again.
        """
        name, named = _named_call(tool, args, kwargs)
        async with self._lock:
            self._ending = True
            try:
                result = await self._call_locked(name, named, _origin(tool))
            finally:
                self._ending = False
        return _typed_result(tool, result)

    async def _call_locked(self, tool: str, args: dict[str, Any], origin: str | None) -> Any:
        catalog = await self.tools()
        self._raise_if_aborted()
        if self._compensating and workflow.patched(QUEUED_CALLS_PATCH):
            # queued behind the lock (a parallel call) while the saga chose to compensate:
            # run now, it would make an effect only to undo it, or wait on an approver meanwhile
            raise ToolFailed(
                tool, "SagaCompensating", "the saga began to compensate first", ran=False
            )
        spec = catalog.get(tool)
        if spec is not None and origin and spec.origin and spec.origin != origin:
            # the worker's tool of that name is another function: running it would run what
            # the workflow never named (and hand back a result of another type)
            raise UnknownTool(
                f"the worker's tool {tool!r} is {spec.origin}, not {origin}: register "
                f"{origin} on the worker, or give one of them another name="
            )
        try:
            input_json = to_json(args)
        except ValueError as exc:  # NaN or an infinity: no JSON, so no journal row
            raise ToolArgumentsInvalid(f"arguments for tool {tool!r}: {exc}") from None
        size = limits.json_size(input_json)
        if size > limits.MAX_VALUE_BYTES and workflow.patched(PAYLOAD_LIMIT_PATCH):
            # the call's activity could never be scheduled: refused before INTENT rather than
            # a workflow task that fails for ever (histories from before replay as they ran)
            limits.check(f"the arguments of tool {tool!r}", size)
        while True:
            adopted = self._adopt(tool, args, input_json)
            if adopted is not None:
                return adopted.result
            try:
                approval_seq: int | None = None
                if spec is not None and spec.reversibility is Reversibility.IRREVERSIBLE:
                    approval_seq = await self._await_approval(spec, input_json)
                outcome = await self._call(spec, tool, args, input_json, approval_seq)
            except _Desync:
                await self._catch_up()
                self._raise_if_aborted()
                continue
            return self._settle(tool, args, outcome)

    async def _call(
        self,
        spec: ToolSpec | None,
        tool: str,
        args: dict[str, Any],
        input_json: str,
        approval_seq: int | None,
    ) -> CallOutcome:
        seq = self.head.seq + 1
        request = CallRequest(
            saga_id=self.saga_id,
            seq=seq,
            prev_hash=self.head.hash,
            tool_name=tool,
            args=args,
            approval_seq=approval_seq,
            approved_input_hash=self._approved_input_hash if approval_seq is not None else None,
            approved_request_hash=self._approved_request_hash if approval_seq is not None else None,
            # the saga completes after this call, unless a failure was swallowed or it aborted
            seal_as=None if self.failures or self.aborted else self._seal_as(SagaState.COMPLETED),
            anchor_intent=self._anchor_next
            or (self._sealed is not None and self._sealed[0] == self.head.seq),
            approver=self._approval.approver if approval_seq and self._approval else None,
            approval_signature=self._approval.signature
            if approval_seq and self._approval
            else None,
        )
        self._running = tool
        try:
            while True:
                try:
                    outcome = await self._shielded(self._start_call(spec, request))
                    break
                except ActivityError as err:
                    notice = halt_notice(err)
                    if notice is None:
                        raise
                    halted = err
                # the same call goes at the same seq once the halt lifts
                await self._held(notice, forward=True)
                if self.aborted:
                    if notice.intent_written:
                        # a retry was held after its INTENT: the first attempt may have acted
                        return await self._recover_call(tool, seq, input_json, halted, approval_seq)
                    if approval_seq is not None:
                        await self._close_request(approval_seq)
                    self._raise_if_aborted()
        except ActivityError as err:
            kind = error_type(err)
            if kind == "SuspectCall":
                cause = err.cause
                details = cause.details if isinstance(cause, ApplicationError) else ()
                intent_hash = str(details[0]) if details else ""
                # the INTENT's input as journaled, which status shows (older workers sent none)
                shown = str(details[1]) if len(details) > 1 else input_json
                return await self._resolve_suspect(
                    tool, seq, intent_hash, input_json, error_message(err), approval_seq, shown
                )
            if kind in _AHEAD:
                raise _Desync from err
            return await self._recover_call(tool, seq, input_json, err, approval_seq)
        finally:
            self._running = None
        early, self._early_resolution = self._early_resolution, None
        if early is not None:
            self._refuse(early.resolver, f"the call at seq {seq} finished by itself; not SUSPECT")
        self._track(outcome.rows)
        self._anchor_next = False
        executed = outcome.status is CallStatus.EXECUTED
        if request.seal_as is not None and executed and self._did_seal(outcome.rows):
            self._sealed = (self.head.seq, request.seal_as)
        return outcome

    def _start_call(self, spec: ToolSpec | None, request: CallRequest) -> Awaitable[CallOutcome]:
        idempotent = spec is not None and spec.idempotent
        return workflow.start_activity(
            names.CALL_TOOL,
            request,
            result_type=CallOutcome,
            # the tool's own limit is enforced inside; this one leaves room to wait out a
            # journal outage
            start_to_close_timeout=timedelta(seconds=spec.timeout_s if spec else 60)
            + _OUTAGE_ALLOWANCE,
            heartbeat_timeout=self._heartbeat_timeout(spec),
            retry_policy=RetryPolicy(
                initial_interval=timedelta(seconds=1),
                maximum_interval=timedelta(seconds=10),
                maximum_attempts=self.options.idempotent_attempts if idempotent else 0,
            ),
        )

    async def _recover_call(
        self,
        tool: str,
        seq: int,
        input_json: str,
        err: ActivityError,
        approval_seq: int | None = None,
    ) -> CallOutcome:
        """The call's activity ended without an outcome: the journal says what happened.

        No INTENT: the tool never started. An outcome row: it stands. INTENT alone: the tool
        may have taken effect, so the call is FAILED with its effect unknown (and compensated).
        """
        error = ErrorInfo(type=error_type(err), message=error_message(err))
        row = RowDraft(
            tool_name=tool,
            phase=Phase.FAILED,
            input=input_json,
            payload=failure_payload(error, effect_unknown=True),
        )
        try:
            resolved = await self._record_outcome(seq, row, approval_seq)
        except ActivityError:
            # no INTENT was written: nothing ran, and there is no row to pair a FAILED with
            self.failures.append(error)
            refused = error.type in _REFUSED_BEFORE_INTENT
            raise ToolFailed(tool, error.type, error.message, ran=not refused) from None
        self._track(resolved.outcome.rows)
        return resolved.outcome

    async def _record_outcome(
        self, seq: int, row: RowDraft, approval_seq: int | None, resolution: Resolve | None = None
    ) -> Resolved:
        """Write the outcome of the call at ``seq`` unless it has one (which is returned);
        ``resolution``: the human's word the row records, which the worker checks first."""
        request = ResolveRequest(
            saga_id=self.saga_id,
            call_seq=seq,
            row=row,
            approval_seq=approval_seq,
            resolution=resolution,
        )
        resolved: Resolved = await self._journal_activity(names.RESOLVE_CALL, request, Resolved)
        return resolved

    def _heartbeat_timeout(self, spec: ToolSpec | None) -> timedelta:
        seconds = self.options.heartbeat_timeout_s or (spec.heartbeat_timeout_s if spec else 30.0)
        return timedelta(seconds=seconds)

    def _settle(self, tool: str, args: dict[str, Any], outcome: CallOutcome) -> Any:
        if outcome.status is CallStatus.REFUSED:
            assert outcome.error is not None
            self.failures.append(outcome.error)
            raise ApprovalRejected(outcome.error.message)
        call_seq = outcome.rows[0].seq
        self._note_view(call_seq, outcome.journaled)
        if outcome.status is CallStatus.EXECUTED:
            self._took_effect(tool, call_seq, args, outcome.result, journaled=outcome.journaled)
            if outcome.result_withheld:
                # undone with the result the journal holds, and the input it was called with
                self._originals[call_seq] = Original(
                    call_seq=call_seq, input=args, result_in_journal=True
                )
        elif outcome.effect_unknown:
            # the call may have done something before it failed: undo whatever it did
            self._took_effect(tool, call_seq, args, None, failed=True, journaled=outcome.journaled)
        if outcome.error is not None:
            self.failures.append(outcome.error)
            raise ToolFailed(tool, outcome.error.type, outcome.error.message)
        self._raise_if_aborted()
        return outcome.result

    async def _resolve_suspect(
        self,
        tool: str,
        seq: int,
        intent_hash: str,
        input_json: str,
        reason: str,
        approval_seq: int | None = None,
        shown: str | None = None,
    ) -> CallOutcome:
        """Stop until a human says whether the call with no outcome took effect.

        ``shown``: the call's input as journaled, when ``input_json`` is the original.
        """
        self._enter(SagaState.SUSPECT, tool)
        self._suspect = Suspect(
            call_seq=seq,
            tool_name=tool,
            input_json=shown or input_json,
            reason=reason,
            intent_hash=intent_hash,
        )
        early, self._early_resolution = self._early_resolution, None
        self._resolution = None
        if early is not None:
            self._take_resolution(early)
        workflow.logger.warning("saga %s: call seq %d of %s is SUSPECT", self.saga_id, seq, tool)
        await self._wait(lambda: self._resolution is not None or self._abort is not None)
        resolution = self._resolution or Resolve(
            call_seq=seq,
            resolver=(self._abort.by if self._abort else None) or "sagacity",
            happened=False,
            result=None,
        )
        unknown = self._resolution is None  # aborted before anyone knew
        spoken = self._resolution
        self._suspect = None
        self._enter(SagaState.RUNNING)
        intent = RowRef(seq=seq, tool_name=tool, phase=Phase.INTENT, hash=intent_hash)
        self._track([intent])  # the INTENT row was written by the attempt that died
        if resolution.happened:
            row = RowDraft(
                tool_name=tool,
                phase=Phase.EXECUTED,
                input=input_json,
                payload=resolution_payload(resolution.resolver, resolution.result),
            )
            status, error = CallStatus.EXECUTED, None
        else:
            message = (
                "aborted before anyone said whether it took effect"
                if unknown
                else f"{resolution.resolver}: the call did not happen"
            )
            error = ErrorInfo(type="SuspectResolved", message=message)
            row = RowDraft(
                tool_name=tool,
                phase=Phase.FAILED,
                input=input_json,
                payload=failure_payload(error, effect_unknown=unknown),
            )
            status = CallStatus.FAILED
        resolved = await self._record_outcome(seq, row, approval_seq, spoken)
        self._track(resolved.outcome.rows[1:])
        written = resolved.outcome.error
        if written is not None and written.type == "ResolutionRefused":
            # the worker refused the human's word (its keyring or policy): effect unknown
            return resolved.outcome
        if not resolved.recorded:
            # the lost attempt had finished after all: its own outcome row stands
            workflow.logger.warning(
                "saga %s: call seq %d already had an outcome; %s's resolution not written",
                self.saga_id,
                seq,
                resolution.resolver,
            )
            return resolved.outcome
        journaled = resolved.outcome.journaled
        if journaled is not None and isinstance(journaled.result, dict):
            # the row holds {"$resolution", "resolved_by", "result"}: what it shows of the result
            journaled = Journaled(input=journaled.input, result=journaled.result.get("result"))
        return CallOutcome(
            status=status,
            result=resolution.result,
            error=error,
            rows=resolved.outcome.rows,
            effect_unknown=unknown,
            journaled=journaled,
        )

    # -- approvals -------------------------------------------------------------------------------

    async def _await_approval(self, spec: ToolSpec, input_json: str) -> int:
        """Journal AWAITING_APPROVAL, wait for a decision or the deadline; return the request seq."""
        seq = self.head.seq + 1
        self._decision = self._approval = None
        self._opening = seq
        try:
            opened: ApprovalOpened = await self._journal_activity(
                names.OPEN_APPROVAL,
                ApprovalOpen(
                    saga_id=self.saga_id,
                    seq=seq,
                    prev_hash=self.head.hash,
                    tool_name=spec.name,
                    input_json=input_json,
                    deadline_s=self.options.approval_deadline_s,
                ),
                ApprovalOpened,
            )
        except ActivityError as err:
            if error_type(err) != "ToolArgumentsInvalid":
                raise
            # the call cannot run, so no approver is asked: nothing was journaled for it
            error = ErrorInfo(type=error_type(err), message=error_message(err))
            self.failures.append(error)
            raise ToolFailed(spec.name, error.type, error.message, ran=False) from None
        finally:
            self._opening = None
        self._track(opened.rows)
        self._approved_input_hash = opened.raw_input_hash
        self._approved_request_hash = opened.input_hash
        # approvers see the request as stored (secrets redacted); its hash is what they confirm
        self._pending = PendingApproval(
            journal_seq=seq,
            tool_name=spec.name,
            input_json=opened.input,
            input_hash=opened.input_hash,
            deadline_s=self.options.approval_deadline_s,
            hidden=opened.hidden,
        )
        # decisions that came with the request's opening, in the same activation (signals are
        # applied first when a worker replays history): judged now that the request is known
        early, self._early_decisions = self._early_decisions, []
        for sent, given_hash in early:
            self._take(sent, given_hash)
        self._enter(SagaState.AWAITING_APPROVAL, spec.name)
        try:
            await self._wait(
                lambda: self._decision is not None or self._abort is not None,
                timeout=timedelta(seconds=self.options.approval_deadline_s),
            )
        except TimeoutError:
            self._decision = Reject(journal_seq=seq, approver="sagacity", reason="timeout")
        decision = self._decision
        if decision is None or self._abort is not None:
            # an abort (or cancel) wins over a decision taken in the same moment
            decision = Reject(
                journal_seq=seq,
                approver=(self._abort.by if self._abort else None) or "sagacity",
                reason=f"aborted: {self._abort.reason if self._abort else ''}",
            )
        self._decided.add(seq)
        pending, self._pending = self._pending, None
        self._enter(SagaState.RUNNING)
        # the decision row repeats the request's input as journaled, which its hash names
        bound = workflow.patched(BOUND_ROWS_PATCH)
        request = {"input": "", "input_of": seq} if bound else {"input": input_json}
        if isinstance(decision, Approve):
            await self._append(
                [
                    RowDraft(
                        tool_name=APPROVAL_GATE,
                        phase=Phase.APPROVED,
                        payload=self._decision_payload(decision, pending)
                        or f"approver={decision.approver}",
                        **request,
                    )
                ]
            )
            if self._abort is None:
                self._approval = decision
                return seq
            # aborted while the approval was being journaled: the approved call never starts
            decision = Reject(
                journal_seq=seq,
                approver=self._abort.by or "sagacity",
                reason=f"aborted before the approved call ran: {self._abort.reason}",
            )
        payload = self._decision_payload(decision, pending) or to_json(
            {"by": decision.approver, "reason": decision.reason}
        )
        if self._abort is not None and workflow.patched(ABORT_ROW_PATCH):
            payload = self._abort_row(self._abort, decision.reason, signed=bound)
        await self._append(
            [RowDraft(tool_name=APPROVAL_GATE, phase=Phase.REJECTED, payload=payload, **request)]
        )
        await self._close_request(seq)
        error = ErrorInfo(type="ApprovalRejected", message=f"{spec.name}: {decision.reason}")
        self.failures.append(error)
        if self._abort is not None:
            self._raise_if_aborted()
        raise ApprovalRejected(f"{spec.name} rejected by {decision.approver}: {decision.reason}")

    async def _close_request(self, journal_seq: int) -> None:
        request = ApprovalClose(saga_id=self.saga_id, journal_seq=journal_seq)
        await self._journal_activity(names.CLOSE_APPROVAL, request, bool)

    def _statement(self, decision: Approve | Reject, pending: PendingApproval) -> Statement:
        """What a signature on ``decision`` must vouch for: this saga, the request, its hash."""
        return Statement(
            saga_id=self.saga_id,
            seq=pending.journal_seq,
            input_hash=pending.input_hash,
            decision="approve" if isinstance(decision, Approve) else "reject",
            principal=decision.approver,
            reason=decision.reason if isinstance(decision, Reject) else "",
        )

    def _decision_payload(
        self, decision: Approve | Reject, pending: PendingApproval | None
    ) -> str | None:
        """A signed decision's row payload (statement and signature); None for an unsigned one."""
        if decision.signature is None or pending is None or self._keyring is None:
            return None
        signer = self._keyring.find(decision.signature.key_id)
        name = signer.name if signer is not None else ""
        return signed_row(self._statement(decision, pending), decision.signature, name)

    def _refusal(
        self, decision: Approve | Reject, given_hash: str | None
    ) -> tuple[RefusalKind, str] | None:
        """Why a decision cannot be taken (a stable kind and a sentence), or None when it can."""
        pending = self._pending
        journal_seq, approver = decision.journal_seq, decision.approver
        if not approver.strip():
            return "no_approver", "a decision must name its approver"
        if journal_seq in self._decided or (
            pending is not None
            and pending.journal_seq == journal_seq
            and self._decision is not None
        ):
            return "already_decided", f"the request at seq {journal_seq} is already decided"
        if pending is None:
            return "not_waiting", "the saga is not waiting for an approval"
        if pending.journal_seq != journal_seq:
            return (
                "unknown_seq",
                f"no request awaits a decision at seq {journal_seq} "
                f"(waiting: {pending.journal_seq})",
            )
        if given_hash is not None and given_hash != pending.input_hash:
            return "input_hash_mismatch", "input_hash does not match the request awaiting approval"
        tool = pending.tool_name
        if not (
            allowed(self.options.approvers, approver, tool)
            and allowed(self._policy.approvers, approver, tool)
        ):
            return "not_allowed", f"{approver!r} may not approve {tool!r}"
        if self._keyring is not None:
            why = self._keyring.refusal(self._statement(decision, pending), decision.signature)
            if why is not None:
                return ("unsigned" if decision.signature is None else "bad_signature"), why
        return None

    def _refuse(self, who: str, why: str) -> None:
        # a signal (or an update the validator let through) is in history, so this note
        # survives replay; a signal's sender is not told. Kept as UTF-8 can carry it: the status
        # query that shows it must encode
        self._refused.append(decode.encodable(f"{who}: {why}"))
        workflow.logger.warning("saga %s refused a decision: %s", self.saga_id, why)

    def _parse(self, signal: str, model: type[M], payloads: tuple[Any, ...]) -> M | None:
        """A signal's one payload, validated strictly; a bad one is refused and recorded.

        Never raised: a raising handler would fail every workflow task and wedge the saga.
        """
        parsed = _validated(model, payloads)
        if isinstance(parsed, str):
            self._refuse(_sender(payloads), f"malformed {signal!r} signal: {parsed}"[:1000])
            return None
        return parsed

    def _take(self, decision: Approve | Reject, given_hash: str | None) -> None:
        if self._pending is None and self._opening == decision.journal_seq:
            self._early_decisions.append((decision, given_hash))
            return
        refusal = self._refusal(decision, given_hash)
        if refusal is not None:
            self._refuse(decision.approver, refusal[1])
            return
        self._decision = decision

    def _on_approve(self, *payloads: Any) -> None:
        decision = self._parse("approve", Approve, payloads)
        if decision is not None:
            self._take(decision, decision.input_hash)

    def _on_reject(self, *payloads: Any) -> None:
        decision = self._parse("reject", Reject, payloads)
        if decision is not None:
            self._take(decision, decision.input_hash)

    def _on_signal(self, name: str, args: Sequence[RawValue]) -> None:
        """Every signal the workflow has no handler of its own for: the saga's are decoded here,
        so one the data converter cannot read is refused and recorded like any bad decision;
        so is a signal of another name (a misspelt decision is not lost in silence)."""
        handler = self._signals.get(name)
        if handler is None:
            self._refuse("?", f"unknown signal {name[:100]!r}")
            return
        payloads = decode.read(args)
        if isinstance(payloads, decode.Unreadable):
            self._refuse("?", f"malformed {name!r} signal: {payloads.why}")
            return
        handler(*payloads)

    def _validate_update(self, name: str, args: Sequence[RawValue]) -> None:
        # a decision is judged in the handler, where its refusal is recorded (a validator's
        # rejection leaves no trace in history); an update of no known name is rejected here
        if name != "decide":
            raise ApplicationError(
                f"this saga has no update {name[:100]!r} (it takes 'decide')",
                type="UnknownUpdate",
                non_retryable=True,
            )

    async def _on_update(self, name: str, args: Sequence[RawValue]) -> str:
        if not workflow.patched(DECIDE_RECORDED_PATCH):
            # before the marker the validator judged the decision (a refusal left no trace in
            # history): a decide update recorded then was taken
            return await self._on_decide(self._read_decision(args))
        decision = self._read_decision(args)
        refusal = self._refusal(decision.as_signal(), decision.input_hash)
        if refusal is not None:
            self._refuse_update(decision.approver, *refusal)
        return await self._on_decide(decision)

    def _read_decision(self, args: Sequence[RawValue]) -> Decision:
        """The update's one payload as a :class:`Decision`; else refused, recorded and raised."""
        payloads = decode.read(args)
        if isinstance(payloads, decode.Unreadable):
            self._refuse_update("?", "invalid", f"malformed decision: {payloads.why}")
        decision = _validated(Decision, tuple(payloads))
        if isinstance(decision, str):
            why = f"malformed decision: {decision}"[:1000]
            self._refuse_update(_sender(tuple(payloads)), "invalid", why)
        return decision

    def _refuse_update(self, who: str, kind: RefusalKind, why: str) -> NoReturn:
        """Record a refused decision, and tell the update's caller: typed, not to be retried."""
        self._refuse(who, why)
        raise ApplicationError(
            decode.encodable(why), kind, type="ApprovalRefused", non_retryable=True
        )

    async def _on_decide(self, decision: Decision) -> str:
        self._decision = decision.as_signal()
        seq = decision.journal_seq
        await workflow.wait_condition(lambda: self.head.seq > seq)
        # what was journaled: an abort in the same moment turns an approval into REJECTED
        written = next((r for r in self.rows if r.seq == seq + 1), None)
        approved = written.phase is Phase.APPROVED if written else decision.approve
        return "approved" if approved else "rejected"

    # -- abort, suspect resolution ------------------------------------------------------------

    def _on_abort(self, *payloads: Any) -> None:
        # no payload at all is a plain abort
        abort = self._parse("abort", Abort, payloads or ({},))
        if abort is not None and self._abort is None:
            self._abort = abort
            self._abort_signalled = True

    def _abort_row(self, abort: Abort, reason: str, *, signed: bool) -> str:
        """The payload of the REJECTED row an abort writes: marked an abort, with its sender.

        With a keyring, a signalled abort's sender is the principal its signature proves, and a
        halt's the operator whose signature the halt carries, else ``unverified:<name>``; it is
        taken either way (an abort only makes the saga safer). A proven one's row carries the
        whole signature (``docs/decisions.md``); ``signed`` False: the older row, with the key
        id only. A cancel names who the workflow itself knows.
        """
        by, key_id = self._abort_sender(abort)
        proof = self._abort_proof(abort) if signed else None
        halt = {"halt": self._abort_halt.record()} if self._abort_halt and signed else {}
        if proof is not None:
            statement, signature = proof
            return signed_row(
                statement, signature, self._signer_name(signature), abort=True, **halt
            )
        row: dict[str, Any] = {"abort": True, "by": by, "reason": reason, **halt}
        if key_id is not None and not signed:
            row["key_id"] = key_id
        return to_json(row)

    def _abort_proof(self, abort: Abort) -> tuple[Statement, Signature] | None:
        """The signed statement that proves who aborted, verified with the keyring (None:
        unsigned, not verified, a cancel, or no keyring to check it with)."""
        if self._keyring is None:
            return None
        halt = self._abort_halt
        if halt is not None:
            statement, signature = halt.statement(), halt.signature
        elif self._abort_signalled and abort.by is not None:
            statement, signature = abort.statement(self.saga_id), abort.signature
        else:
            return None
        if statement is None or signature is None:
            return None
        return (
            (statement, signature) if self._keyring.refusal(statement, signature) is None else None
        )

    def _signer_name(self, signature: Signature) -> str:
        found = self._keyring.find(signature.key_id) if self._keyring is not None else None
        return found.name if found is not None else ""

    def _abort_sender(self, abort: Abort) -> tuple[str, str | None]:
        """Who sent ``abort``, as the journal and the saga's error name them, and the key that
        proves it (None: unsigned, or no keyring to check it with)."""
        name = abort.by or "sagacity"
        proven = self._abort_signalled or self._abort_halt is not None
        if not proven or self._keyring is None:
            return name, None
        proof = self._abort_proof(abort)
        if proof is not None:
            return name, proof[1].key_id
        return f"unverified:{name}", None

    def _on_halt(self, *payloads: Any) -> None:
        """An operator halted this saga: under ``compensate`` it aborts (unless it waits for an
        approval, which stays waiting, or already compensates); under ``keep`` its next call is
        held anyway, by the activities' gate.

        The signal is obeyed only when it is real, as an activity judges it (so replay follows
        the recorded answer): the halt store holds that halt in force, or (the store has no such
        halt) its signature verifies with the worker's keyring. Otherwise it is refused and
        recorded in ``refused_decisions``.
        """
        notice = self._parse("halt", HaltNotice, payloads)
        if notice is None or notice.policy != "compensate":
            return
        if not workflow.patched(HALT_CHECK_PATCH):
            if self._pending is None and self._abort is None:
                self._abort = _halt_abort(notice)
            return
        if not self._halt_aborts():
            return
        lookup = asyncio.create_task(self._look_up_halt(notice))
        self._halt_lookups.add(lookup)
        lookup.add_done_callback(self._halt_lookups.discard)

    def _halt_aborts(self) -> bool:
        """Whether a halt may abort the saga now: not when it aborted already, waits for an
        approval (it stays waiting) or compensates after a failure (the halt stops what is
        still to run, and only compensations are: the saga ends as it would have)."""
        return self._abort is None and self._pending is None and not self._ending

    async def _look_up_halt(self, notice: HaltNotice) -> None:
        """Obey ``notice`` if an activity finds it real (the halt store holds it in force, or
        its signature verifies) and aborting this saga; else refuse it (recorded)."""
        sender = notice.operator or "?"
        try:
            found: HaltLookedUp = await workflow.execute_activity(
                names.READ_HALT,
                HaltLookup(saga_id=self.saga_id, told=notice),
                result_type=HaltLookedUp,
                start_to_close_timeout=_JOURNAL_TIMEOUT,
                retry_policy=_JOURNAL_RETRY,
            )
        except ActivityError as err:
            self._refuse(sender, f"halt {notice.halt_id} refused: {error_message(err)}")
            return
        if found.notice is None:
            self._refuse(sender, f"halt {notice.halt_id} refused: {found.refusal}")
        elif self._halt_aborts():
            self._abort_for(found.notice)

    def _abort_for(self, notice: HaltNotice) -> None:
        """Abort for the operator's halt ``notice``, named as its signature proves."""
        self._abort = _halt_abort(notice)
        self._abort_halt = notice

    def _on_resume(self, *payloads: Any) -> None:
        if self._parse("resume", Resume, payloads or ({},)) is not None:
            self._resumes += 1

    async def _held(self, notice: HaltNotice, *, forward: bool) -> None:
        """Wait out a halt that refused a call (``forward``) or a compensation.

        A call under a ``compensate`` halt aborts the saga instead. The wait ends at a
        ``resume`` signal, an abort, or the next look: the activity checks the halt again, so a
        lost signal only delays the saga.
        """
        if forward and notice.policy == "compensate":
            if self._abort is None:
                if workflow.patched(HALT_CHECK_PATCH):
                    self._abort_for(notice)  # the activity read it from the halt store
                else:
                    self._abort = _halt_abort(notice)
            return
        if forward and self.aborted:
            return
        before, self._halt = self.state, notice
        self._enter(SagaState.HALTED)
        seen = self._resumes
        looks = self._halt_looks
        self._halt_looks += 1
        try:
            await self._wait(
                lambda: self._resumes != seen or (forward and self.aborted),
                timeout=min(_HALT_RECHECK * 2**looks, _HALT_RECHECK_MAX),
            )
        except TimeoutError:
            pass
        finally:
            self.state, self._halt = before, None
            if self._resumes != seen:
                self._halt_looks = 0
        self._enter(before)  # shown again: the activity looks at the halt next

    def _on_resolve(self, *payloads: Any) -> None:
        resolution = self._parse("resolve", Resolve, payloads)
        if resolution is None:
            return
        if self._suspect is None and self._running and resolution.call_seq == self.head.seq + 1:
            # the call's failure and this signal can reach the workflow in one activation, the
            # signal first (a worker replaying history): keep it for when the call goes SUSPECT
            self._early_resolution = resolution
            return
        self._take_resolution(resolution)

    def _take_resolution(self, resolution: Resolve) -> None:
        """Take a resolution of the SUSPECT call, or refuse it (recorded) and change nothing."""
        suspect = self._suspect
        if suspect is None or suspect.call_seq != resolution.call_seq:
            self._refuse(resolution.resolver, f"no SUSPECT call at seq {resolution.call_seq}")
            return
        if self._resolution is not None:
            # two resolutions in one activation: the first one taken stands
            self._refuse(
                resolution.resolver,
                f"the SUSPECT call at seq {resolution.call_seq} is already resolved "
                f"by {self._resolution.resolver}",
            )
            return
        if not allowed(self._policy.resolvers, resolution.resolver, suspect.tool_name):
            self._refuse(
                resolution.resolver,
                f"{resolution.resolver!r} may not resolve {suspect.tool_name!r} calls",
            )
            return
        if self._keyring is not None:
            why = self._keyring.refusal(
                resolution_statement(self.saga_id, suspect.intent_hash, resolution),
                resolution.signature,
            )
            if why is not None:
                self._refuse(resolution.resolver, f"resolution refused: {why}")
                return
        self._resolution = resolution

    def _raise_if_aborted(self) -> None:
        if self._abort is not None:
            kind = SagaCancelled if self._cancelled else SagaAborted
            by, _ = self._abort_sender(self._abort)
            raise kind(f"aborted by {by}: {self._abort.reason}")

    @property
    def aborted(self) -> bool:
        return self._abort is not None

    def abort(self, reason: str, *, by: str) -> None:
        """Abort from the workflow's own code, as the ``abort`` signal from ``by`` would: a call
        waiting for approval is rejected, and the saga compensates. A second abort changes
        nothing."""
        if self._abort is None:
            self._abort = Abort(reason=reason, by=by)

    @property
    def cancelled(self) -> bool:
        """Whether a Temporal cancel request reached the saga (it aborts, then compensates)."""
        return self._cancelled

    # -- journal bookkeeping -----------------------------------------------------------------

    def _track(self, rows: list[RowRef]) -> None:
        for row in rows:
            if row.seq == self.head.seq + 1:
                self.rows.append(row)
                self.head = Head(seq=row.seq, hash=row.hash)
        if len(self.rows) > STATUS_ROWS:
            del self.rows[: len(self.rows) - STATUS_ROWS]

    async def _journal_activity(self, name: str, request: BaseModel, result_type: type[T]) -> T:
        """A journal write; when the journal is ahead of this run, it is re-read first."""
        try:
            result: T = await self._shielded(
                workflow.start_activity(
                    name,
                    request,
                    result_type=result_type,
                    start_to_close_timeout=_JOURNAL_TIMEOUT,
                    heartbeat_timeout=self._heartbeat_timeout(None),
                    retry_policy=_JOURNAL_RETRY,
                )
            )
        except ActivityError as err:
            if error_type(err) in _AHEAD:
                raise _Desync from err
            raise
        return result

    async def _append(self, rows: list[RowDraft]) -> list[RowRef]:
        while True:
            request = AppendRequest(
                saga_id=self.saga_id, seq=self.head.seq + 1, prev_hash=self.head.hash, rows=rows
            )
            try:
                written: list[RowRef] = await self._journal_activity(
                    names.APPEND, request, list[RowRef]
                )
            except _Desync:
                await self._catch_up()
                continue
            self._track(written)
            return written

    # -- compensation ------------------------------------------------------------------------

    async def compensate(
        self, *, continue_as_new: Callable[[SagaCarry], None] | None = None
    ) -> tuple[list[Effect], list[Effect], list[Effect]]:
        """Undo executed effects in reverse order; returns (compensated, failed, still live).

        With ``continue_as_new`` (which must raise ``workflow.continue_as_new``), a long
        compensation hands its state to a new run whenever history grows long.
        """
        self._compensating = True  # before the lock: calls queued ahead of it do not start
        async with self._lock:
            self._enter(SagaState.COMPENSATING)
            catalog = await self.tools()
            undone_here = 0
            while self.executed:
                if continue_as_new and undone_here and self.continue_as_new_suggested():
                    continue_as_new(self.carry())
                effect = self.executed.pop()
                undone_here += 1
                spec = catalog.get(effect.tool_name)
                if spec is None or not spec.has_compensation:
                    self._live.append(effect)
                    continue
                self._undoing = effect
                try:
                    undone = await self._compensate_one(spec, effect)
                finally:
                    self._undoing = None
                if undone:
                    self._compensated.append(effect)
                else:
                    self._compensation_failed.append(effect)
                    self._live.append(effect)
            self._adoptable = []
            return self._compensated, self._compensation_failed, self._live

    async def _compensate_one(self, spec: ToolSpec, effect: Effect) -> bool:
        # the compensation gets what the call really took and returned, not the journal's view
        original = self._originals.get(effect.call_seq)
        input_json = to_json(original.input if original else effect.input)
        # the last effect undone, none having failed: the saga ends after its row
        last = not self.executed and not self._compensation_failed
        end = SagaState.ABORTED if self.aborted else SagaState.COMPENSATED
        seal_as = self._seal_as(end) if last else None
        while True:
            request = CompensateRequest(
                saga_id=self.saga_id,
                seq=self.head.seq + 1,
                prev_hash=self.head.hash,
                tool_name=effect.tool_name,
                call_seq=effect.call_seq,
                input_json=input_json,
                result=original.result if original else effect.result,
                failed=effect.failed,
                by_ref=effect.by_ref and original is None,
                result_by_ref=original is not None and original.result_in_journal,
                seal_as=seal_as,
            )
            try:
                rows = await self._shielded(
                    workflow.start_activity(
                        names.COMPENSATE,
                        request,
                        result_type=list[RowRef],
                        start_to_close_timeout=timedelta(seconds=spec.timeout_s)
                        + _OUTAGE_ALLOWANCE,
                        heartbeat_timeout=self._heartbeat_timeout(spec),
                        retry_policy=RetryPolicy(
                            initial_interval=timedelta(seconds=self.options.compensation_backoff_s),
                            backoff_coefficient=2.0,
                            maximum_interval=timedelta(
                                seconds=self.options.compensation_max_interval_s
                            ),
                            maximum_attempts=self.options.compensation_attempts,
                        ),
                    )
                )
            except ActivityError as err:
                notice = halt_notice(err)
                if notice is not None:
                    await self._held(notice, forward=False)
                    continue
                if error_type(err) in _AHEAD:
                    # another run wrote past this one; if it undid this effect, it is done
                    self.executed.append(effect)
                    await self._catch_up()
                    if effect not in self.executed:
                        return True
                    self.executed.remove(effect)
                    continue
                await self._journal_compensation_failed(effect, input_json, err)
                return False
            self._track(rows)
            if seal_as is not None and self._did_seal(rows):
                self._sealed = (self.head.seq, seal_as)
            return True

    async def _journal_compensation_failed(
        self, effect: Effect, input_json: str, err: ActivityError
    ) -> None:
        # an undo that failed for good says on which attempt (no patch needed: the append's
        # input is not part of the history's commands, and a replay takes its recorded one)
        failed = compensation_failure(err, self.options.compensation_attempts)
        await self._append(
            [
                RowDraft(
                    tool_name=effect.tool_name,
                    phase=Phase.COMPENSATION_FAILED,
                    input=input_json,
                    input_of=(
                        effect.call_seq
                        if effect.by_ref and effect.call_seq not in self._originals
                        else None
                    ),
                    payload=to_json(failed),
                )
            ]
        )
        workflow.logger.error(
            "saga %s: compensation of %s (call seq %d) failed: %s",
            self.saga_id,
            effect.tool_name,
            effect.call_seq,
            failed["message"],
        )

    # -- running a whole saga ----------------------------------------------------------------

    async def run(
        self,
        body: Callable[[], Awaitable[T]],
        *,
        compensate_swallowed_failures: bool = True,
        continue_as_new: Callable[[SagaCarry], None] | None = None,
    ) -> SagaResult:
        """Run ``body``; on a failure, an abort, a cancel or a rejection, compensate in reverse.

        With ``compensate_swallowed_failures`` (the default), a tool failure that ``body``
        caught and carried on from still ends the saga compensated. A Temporal cancel ends the
        saga ABORTED, its effects compensated, and the workflow completes with that result.
        ``continue_as_new`` (a function that raises ``workflow.continue_as_new`` with the
        carry) lets a long compensation go on in new runs; a saga that continued as new in
        the middle of compensating resumes there, without running ``body``. The run that ends
        the saga seals its journal's final head.
        """
        error: ErrorInfo | None = self._error
        value: Any = None
        try:
            await self.tools()  # claim the journal before anything else
            if error is None:
                value = await body()
        except (SagacityError, ActivityError) as exc:
            # an activity that exhausted its retries is a failure too: compensate what ran
            error = ErrorInfo(type=type(exc).__name__, message=str(exc))
        except asyncio.CancelledError:
            self._cancel_requested()
        if error is None and self.aborted:
            error = ErrorInfo(
                type="SagaCancelled" if self._cancelled else "SagaAborted",
                message=f"aborted: {self._abort.reason if self._abort else ''}",
            )
        if error is None and self.failures and compensate_swallowed_failures:
            first = self.failures[0]
            error = ErrorInfo(
                type=first.type, message=f"a tool failure was swallowed: {first.message}"
            )
        if error is None:
            self._enter(SagaState.COMPLETED)
            self._flag_unknown_effects()
            value = self._fitting(value)
            await self._seal()
            return self.result(value)
        self._error = error
        self._ending = True
        compensated: list[Effect] = []
        failed: list[Effect] = []
        live = list(self.executed)
        if not self._left_to_rollback:
            compensated, failed, live = await self.compensate(continue_as_new=continue_as_new)
        if failed:
            self._enter(SagaState.COMPENSATION_FAILED)
            self.needs_attention = (
                f"{len(failed)} compensation(s) failed; their effects are still live: "
                + ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in failed)
            )
        else:
            self._enter(SagaState.ABORTED if self.aborted else SagaState.COMPENSATED)
            unknown = [e for e in live if e.failed]
            if self._left_to_rollback and live:
                self.needs_attention = (
                    "the saga was rolled back; the rollback undoes what is still live (run "
                    "`sagacity saga rollback` again if it ended unfinished): "
                    + ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in live)
                )
            elif unknown:
                self.needs_attention = (
                    f"{len(unknown)} failed call(s) may have taken effect and cannot be "
                    "compensated; check them: "
                    + ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in unknown)
                )
        await self._seal()
        return self.result(value, error=error, compensated=compensated, failed=failed, live=live)

    def _did_seal(self, rows: list[RowRef]) -> bool:
        """Whether the activity that wrote ``rows`` sealed the last one, as it reports (workers
        from before the report: as asked; histories recorded then replay as they ran)."""
        return bool(rows) and (rows[-1].sealed or not self._seals_reported)

    def _seal_as(self, state: SagaState) -> SagaState | None:
        """``state``, when the saga is ending and the worker seals in the last row's activity."""
        return state if self._ending and self._seals and self._seals_in_calls else None

    async def _seal(self) -> None:
        """Seal the ended saga's final head: a signed checkpoint that no row may follow.

        When the worker signs checkpoints, the activity that writes the last row seals it (the
        last compensation, or a :meth:`call_last` that executed); otherwise one local activity
        does, after the last row. A saga that journaled nothing has nothing to seal. A journal
        that went on past this run's head is not sealed: logged, and the saga ends as decided.
        Both are read from the recorded ``open_saga`` result, not patch markers: older histories
        replay as they ran, and a saga pays no marker events for it.
        """
        if not self.head.seq or not self._seals or self._sealed == (self.head.seq, self.state):
            return  # nothing to seal, no key to seal with, or the last row's activity sealed it
        request = SealRequest(saga_id=self.saga_id, head=self.head, state=self.state)
        try:
            await self._shielded(
                workflow.start_local_activity(
                    names.SEAL_SAGA,
                    request,
                    result_type=bool,
                    start_to_close_timeout=_JOURNAL_TIMEOUT,
                    retry_policy=_JOURNAL_RETRY,
                )
            )
        except ApplicationError as err:
            # a local activity's failure arrives as the activity's own error (JournalAhead,
            # SeqConflict), not wrapped in an ActivityError; the retry policy retries the rest
            workflow.logger.error(
                "saga %s: its end at seq %d is not sealed: %s: %s",
                self.saga_id,
                self.head.seq,
                err.type,
                err.message,
            )

    def _fitting(self, value: Any) -> Any:
        """``value``, the body's return value, unless it is too large for the workflow's result:
        then None, and ``needs_attention`` says so (the saga completed; its effects stand)."""
        size = workflow.payload_converter().to_payload(value).ByteSize()
        if size <= limits.MAX_VALUE_BYTES or not workflow.patched(PAYLOAD_LIMIT_PATCH):
            return value
        note = (
            f"the saga completed, but its body's return value ({size:,} bytes) is too large for "
            f"Temporal's history ({limits.MAX_VALUE_BYTES:,}): it is not in the result"
        )
        self.needs_attention = "; ".join(filter(None, (self.needs_attention, note)))
        return None

    def _flag_unknown_effects(self) -> None:
        unknown = [e for e in self.executed if e.failed]
        if unknown:
            self.needs_attention = (
                f"the saga completed, but {len(unknown)} failed call(s) may have taken effect: "
                + ", ".join(f"{e.tool_name} (seq {e.call_seq})" for e in unknown)
            )

    def result(
        self,
        value: Any,
        *,
        error: ErrorInfo | None = None,
        compensated: list[Effect] | None = None,
        failed: list[Effect] | None = None,
        live: list[Effect] | None = None,
    ) -> SagaResult:
        compensated = compensated or []
        return SagaResult(
            saga_id=self.saga_id,
            status=self.state,
            value=value,
            error=error,
            compensated=compensated[:RESULT_EFFECTS],
            compensation_failed=failed or [],
            live_effects=live or [],
            needs_attention=self.needs_attention,
            head=self.head,
            compensated_count=len(compensated),
        )

    def _enter(self, state: SagaState, waiting_tool: str | None = None) -> None:
        """Go to ``state``, shown in the saga's search attributes when it has them.

        Every change of state goes through here. ``waiting_tool``: the tool whose call waits for
        a human (at its approval gate, or SUSPECT). An upsert is a command in the history, so
        there is one per change of what is shown, and none where ``open_saga`` recorded that the
        namespace lacks the attributes (upserting one fails the workflow task) or in histories
        from before them: they replay as they ran.
        """
        self.state = state
        shown = (state, waiting_tool)
        # compensating passes by: the state it ends in is shown (an upsert saved on every
        # rollback; `status` says it compensates)
        if not self._visible or shown == self._shown or state is SagaState.COMPENSATING:
            return
        self._shown = shown
        tool = visibility.WAITING_TOOL
        workflow.upsert_search_attributes(
            [
                visibility.STATE.value_set(state.value),
                tool.value_set(waiting_tool) if waiting_tool else tool.value_unset(),
            ]
        )

    def status(self) -> SagaStatus:
        return SagaStatus(
            saga_id=self.saga_id,
            state=self.state,
            head=self.head,
            rows=self.rows,
            executed=self.executed[-STATUS_ROWS:],
            executed_count=len(self.executed),
            running=self._running,
            pending_approval=self._pending,
            suspect=self._suspect,
            refused_decisions=self._refused,
            needs_attention=self.needs_attention,
            halted=self._halt,
            compensating=(
                Compensating(tool_name=self._undoing.tool_name, call_seq=self._undoing.call_seq)
                if self._undoing is not None
                else None
            ),
        )
