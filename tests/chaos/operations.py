"""What operators and clients do to running sagas, played against a worker process.

Each saga has a :class:`Fate`: how the driver, playing its humans, means it to end. Around that,
a plan can add what happens to sagas in production: a Temporal cancel or an abort at a random
moment (or right after an approval), signals and updates with bad payloads, decisions through the
``decide`` update instead of a signal, and a new saga started under the saga's id, while it runs
or after it ended; and what :mod:`tests.chaos.operator_moves` does: a terminate and a
``sagacity saga rollback``, a reset, a ``keep`` halt while compensations run, decisions as raw
bytes, a 3 MB argument. :class:`OpsDriver` runs one plan and records what it did and saw, for
:mod:`tests.chaos.operations_checks` to judge.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any, Literal

import psycopg
from temporalio.api.common.v1 import Payload
from temporalio.client import (
    Client,
    WorkflowFailureError,
    WorkflowHandle,
    WorkflowUpdateFailedError,
    WorkflowUpdateRPCTimeoutOrCancelledError,
)
from temporalio.common import RawValue
from temporalio.exceptions import ApplicationError, TerminatedError, WorkflowAlreadyStartedError
from temporalio.service import RPCError

from sagacity.temporal.failures import error_type
from sagacity.temporal.models import (
    Abort,
    Approve,
    Decision,
    Reject,
    Resolve,
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    SagaStatus,
    Step,
)
from sagacity.temporal.names import SAGA_BUSY
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.chaos.harness import APPROVER, RESOLVER, effect_of, retrying
from tests.chaos.operator_moves import (
    Hold,
    Rollback,
    cli_env,
    hold_compensations,
    raw_decision,
    reset_after_first_effect,
    send_raw_signal,
    send_raw_update,
    terminate_and_roll_back,
)
from tests.chaos.replays import replay_failure
from workflows.order.workflows import OrderRequest, order_steps

#: who the driver's aborts are journaled as
ABORTER = "chaos-operator"
#: the approver named in bad signals and updates (a valid name, so refusals say who sent them)
MALLORY = "chaos-mallory"
#: how often the driver looks at each saga it runs
POLL_S = 0.7
#: how long the driver waits before it sends again an update a busy saga turned away, and how
#: often it does so for a saga (a minute's worth; a saga busy longer is reported)
BUSY_AGAIN_S = 0.2
BUSY_TRIES = 300
#: how the SDK refuses an update for which the workflow has registered no handler (yet)
#: a seq no saga of these tests reaches: decisions for it are refused, never taken
NO_SUCH_SEQ = 9999
#: BIG_ARGUMENT: the note ``make_note`` returns; ``attach_note`` takes it six times (3 MB)
NOTE_SIZE = 500_000
#: HALT_COMPENSATING: how long the courier's undo runs, the halt coming meanwhile
UNDO_STALL_S = 4.0
#: how long ``sagacity saga rollback --wait`` may take, a Postgres outage it waits out included
ROLLBACK_S = 120.0


def _error_chain(exc: BaseException) -> str:
    """``exc`` and its causes, outermost first: a failed workflow's reason is in its cause."""
    parts: list[str] = []
    seen: BaseException | None = exc
    while seen is not None and len(parts) < 6:
        kind = getattr(seen, "type", None) or type(seen).__name__
        parts.append(f"{kind}: {seen}")
        seen = seen.__cause__ or getattr(seen, "cause", None)
    return " <- ".join(parts)


class Fate(StrEnum):
    """How a saga is meant to end, and what the driver does to make it so."""

    #: approved: completes
    COMPLETE = "complete"
    #: rejected at the gate: compensated
    REJECT = "reject"
    #: a steps saga whose idempotent courier call times out on every attempt: compensated
    COURIER_FAILS = "courier-fails"
    #: an ``abort`` signal at a random moment, the decision withheld: aborted
    ABORT = "abort"
    #: approved, and aborted in the same breath: aborted, the confirmation never sent
    ABORT_AFTER_APPROVE = "abort-after-approve"
    #: a Temporal cancel at a random moment, the decision withheld: aborted (SagaCancelled)
    CANCEL = "cancel"
    #: a Temporal cancel while the saga waits at its gate: aborted (SagaCancelled)
    CANCEL_AT_GATE = "cancel-at-gate"
    #: terminated at its gate (no workflow code runs), then ``sagacity saga rollback --wait``:
    #: every effect compensated, though the workflow has no result
    TERMINATE_ROLLBACK = "terminate-rollback"
    #: reset to the workflow task after its first effect, then approved: completes
    RESET_COMPLETE = "reset-complete"
    #: a steps saga rejected, halted with policy ``keep`` while its slow undos run, the halt
    #: lifted after a while: compensated, no undo started under the halt
    HALT_COMPENSATING = "halt-compensating"
    #: a steps saga whose call mid-saga takes a 3 MB argument: completes, or ends with a typed
    #: refusal of that call before its INTENT; never wedged
    BIG_ARGUMENT = "big-argument"


EXPECTED: dict[Fate, SagaState] = {
    Fate.COMPLETE: SagaState.COMPLETED,
    Fate.REJECT: SagaState.COMPENSATED,
    Fate.COURIER_FAILS: SagaState.COMPENSATED,
    Fate.ABORT: SagaState.ABORTED,
    Fate.ABORT_AFTER_APPROVE: SagaState.ABORTED,
    Fate.CANCEL: SagaState.ABORTED,
    Fate.CANCEL_AT_GATE: SagaState.ABORTED,
    Fate.TERMINATE_ROLLBACK: SagaState.COMPENSATED,
    Fate.RESET_COMPLETE: SagaState.COMPLETED,
    Fate.HALT_COMPENSATING: SagaState.COMPENSATED,
    Fate.BIG_ARGUMENT: SagaState.COMPLETED,
}
#: fates whose decision the driver withholds (the saga waits at its gate for the abort)
WITHHELD = frozenset({Fate.ABORT, Fate.CANCEL})
CANCELLED = frozenset({Fate.CANCEL, Fate.CANCEL_AT_GATE})
#: fates that are run as steps sagas (their tools are the chaos app's)
STEPS_ONLY = frozenset({Fate.COURIER_FAILS, Fate.HALT_COMPENSATING, Fate.BIG_ARGUMENT})

Workflow = Literal["order", "steps"]
#: a new saga under this one's id: none, while it runs, or after it ended
Reuse = Literal["none", "while-running", "after"]


@dataclass(frozen=True)
class OpsPlan:
    saga_id: str
    fate: Fate
    #: ``order``: the hand-written ``order.PlaceOrder``; ``steps``: the generic ``sagacity.Steps``
    #: with a ``book_courier`` step between the order and the confirmation
    workflow: Workflow = "order"
    product_id: str = "p-1"
    quantity: int = 1
    #: steps sagas: how many courier attempts hang past the tool's time limit (3: all of them)
    slow_attempts: int = 0
    #: seconds after the run begins that the saga is started
    start_after_s: float = 0.0
    #: ABORT and CANCEL: seconds after its start that the saga is aborted or cancelled
    disrupt_after_s: float = 0.0
    bad_signals: int = 0
    bad_updates: int = 0
    #: decisions sent as raw bytes (10k-deep JSON, lone surrogates, invalid UTF-8)
    raw_signals: int = 0
    raw_updates: int = 0
    decide_by: Literal["signal", "update"] = "signal"
    reuse: Reuse = "none"
    #: overrides every tool's heartbeat timeout (how soon a killed worker's calls are retried)
    heartbeat_timeout_s: float | None = 2.0

    @property
    def expected(self) -> SagaState:
        return EXPECTED[self.fate]


@dataclass
class OpsOutcome:
    """What the driver did to one saga and what it saw."""

    plan: OpsPlan
    run_id: str | None = None
    result: SagaResult | None = None
    #: the ``status`` query on the ended saga: what it refused, among others
    final: SagaStatus | None = None
    error: str | None = None
    decided: set[int] = field(default_factory=set)
    #: SUSPECT calls the driver resolved: (call seq, tool, happened)
    resolved: list[tuple[int, str, bool]] = field(default_factory=list)
    #: the abort or cancel reached the running saga
    disrupted: bool = False
    #: bad signals Temporal accepted, by kind: ``malformed`` or ``misdirected`` (well-formed, for
    #: a request that does not wait); ``unsure``: the send timed out, delivered or not
    signals: Counter[str] = field(default_factory=Counter)
    #: bad updates by what came back: ``refused`` (ApprovalRefused), ``accepted``, ``error: …``
    updates: Counter[str] = field(default_factory=Counter)
    #: what starting a new saga under this id did, as sentences; problems start with ``!``
    reuse: list[str] = field(default_factory=list)
    #: things the driver saw that must not happen, as sentences
    problems: list[str] = field(default_factory=list)
    #: SUSPECT calls seen (call seqs), resolved or not
    suspects_seen: set[int] = field(default_factory=set)
    #: the seq of the saga's approval request, once seen (bad decisions name it)
    gate_seq: int | None = None
    #: the last status the driver saw while the saga ran
    last: SagaStatus | None = None
    #: the final status query failed and the history does not replay: why
    unreplayable: str | None = None
    #: TERMINATE_ROLLBACK: what ``sagacity saga rollback --wait`` did
    rollback: Rollback | None = None
    #: RESET_COMPLETE: the run the reset started
    reset_run: str | None = None
    #: HALT_COMPENSATING: the undos journaled when the ``keep`` halt took hold and was lifted
    hold: Hold | None = None


def undecodable(seq: int) -> list[RawValue]:
    """Decisions naming the request at ``seq`` that Temporal's data converter cannot decode
    (the approver: JSON nested 10,000 deep, a lone surrogate, bytes that are not UTF-8), as a
    client of another language sends them as easily as good ones."""
    approvers = (b"[" * 10_000 + b"]" * 10_000, b'"\\udc00x"', b'"\xff\xfe"')
    return [
        RawValue(
            Payload(
                metadata={"encoding": b"json/plain"},
                data=b'{"journal_seq": %d, "approve": true, "approver": %s}' % (seq, approver),
            )
        )
        for approver in approvers
    ]


def bad_signal(rng: random.Random, seq: int) -> tuple[str, Any, str]:
    """A signal the saga must refuse and record: (name, payload, kind). ``seq`` is the request
    awaiting a decision (or a plausible one): bad payloads that name it must still change nothing.
    """
    choices: list[tuple[str, Any, str]] = [
        ("approve", {"journal_seq": seq, "approver": MALLORY, "approved_by": "x"}, "malformed"),
        ("approve", {"journal_seq": str(seq), "approver": MALLORY}, "malformed"),
        ("approve", {"journal_seq": seq, "approver": "mallory\x00"}, "malformed"),
        ("approve", {"journal_seq": seq, "approver": MALLORY, "input_hash": "0"}, "malformed"),
        ("approve", {"journal_seq": seq, "approver": "m" * 5000}, "malformed"),
        ("approve", {"journal_seq": True, "approver": MALLORY}, "malformed"),
        ("reject", {"journal_seq": seq, "approver": MALLORY, "reason": 7}, "malformed"),
        ("reject", {"journal_seq": seq, "approver": MALLORY, "reason": "no\x00"}, "malformed"),
        ("reject", [seq, MALLORY], "malformed"),
        ("abort", {"reason": 5}, "malformed"),
        ("abort", {"reason": "stop", "by": MALLORY, "force": True}, "malformed"),
        ("abort", "stop now", "malformed"),
        ("resolve", {"call_seq": 1, "resolver": MALLORY, "happened": "yes"}, "malformed"),
        ("resolve", None, "malformed"),
        *(("approve", bad, "malformed") for bad in undecodable(seq)),
        ("approve", {"journal_seq": NO_SUCH_SEQ, "approver": MALLORY}, "misdirected"),
        ("reject", {"journal_seq": NO_SUCH_SEQ, "approver": MALLORY}, "misdirected"),
        (
            "resolve",
            {"call_seq": NO_SUCH_SEQ, "resolver": MALLORY, "happened": True},
            "misdirected",
        ),
    ]
    return rng.choice(choices)


def bad_update(rng: random.Random, seq: int) -> Any:
    """A ``decide`` payload the saga must refuse with ApprovalRefused, changing nothing."""
    choices: list[Any] = [
        {"journal_seq": seq, "approver": MALLORY, "approve": True, "input_hsh": "0" * 64},
        {"journal_seq": seq, "approver": MALLORY, "approve": "yes"},
        {"journal_seq": seq, "approver": "eve\x00", "approve": True},
        {"journal_seq": seq, "approver": MALLORY},
        {"journal_seq": seq, "approver": MALLORY, "approve": True, "input_hash": "f" * 64},
        {"journal_seq": NO_SUCH_SEQ, "approver": MALLORY, "approve": True},
        ["approve", seq],
        "approve",
        *undecodable(seq),
    ]
    return rng.choice(choices)


def start_args(plan: OpsPlan) -> tuple[str, Any]:
    """The workflow type and input that start ``plan``'s saga."""
    options = SagaOptions(heartbeat_timeout_s=plan.heartbeat_timeout_s)
    if plan.workflow == "order":
        return "order.PlaceOrder", OrderRequest(
            product_id=plan.product_id, quantity=plan.quantity, options=options
        )
    spec = order_steps(plan.product_id, plan.quantity, options)
    courier = Step(
        tool="book_courier",
        args={
            "order_id": {"$ref": "create_order.order_id"},
            "slow_attempts": plan.slow_attempts,
            "undo_stall_s": UNDO_STALL_S if plan.fate is Fate.HALT_COMPENSATING else 0.0,
        },
    )
    spec.steps.insert(2, courier)
    if plan.fate is Fate.BIG_ARGUMENT:
        note = {"$ref": "make_note.note"}
        spec.steps[3:3] = [
            Step(tool="make_note", args={"size": NOTE_SIZE}),
            Step(
                tool="attach_note",
                args={
                    "order_id": {"$ref": "create_order.order_id"},
                    **dict.fromkeys("abcdef", note),
                },
            ),
        ]
    return STEPS_WORKFLOW, spec


def reuse_args(plan: OpsPlan, rng: random.Random) -> tuple[str, Any]:
    """Another saga under ``plan``'s id: the same, or with other input, or another workflow."""
    kind = rng.choice(["same", "other-input", "steps"])
    if kind == "same":
        return start_args(plan)
    if kind == "other-input":
        return "order.PlaceOrder", OrderRequest(product_id="p-2", quantity=3)
    return STEPS_WORKFLOW, SagaSpec(
        steps=[Step(tool="reserve_inventory", args={"product_id": "p-1", "quantity": 1})]
    )


async def footprint(database_url: str, saga_id: str) -> dict[str, Any]:
    """Everything stored for ``saga_id``: journal, approval requests and the shop's tables."""
    queries = {
        "journal": "SELECT seq, phase, hash FROM side_effect_journal WHERE saga_id = %s "
        "ORDER BY seq",
        "approval requests": "SELECT journal_seq FROM sagacity_approval_request WHERE saga_id = %s",
        "reservations": "SELECT id, status FROM reservations WHERE saga_id = %s ORDER BY id",
        "orders": "SELECT id, status FROM orders WHERE saga_id = %s ORDER BY id",
        "outbox": "SELECT id FROM outbox WHERE saga_id = %s ORDER BY id",
        "courier": "SELECT id, status, attempts FROM courier_bookings WHERE saga_id = %s",
    }
    found: dict[str, Any] = {}
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        for name, query in queries.items():
            found[name] = await (await conn.execute(query, (saga_id,))).fetchall()
    return found


class OpsDriver:
    """Runs :class:`OpsPlan` sagas on one task queue and plays their humans and operators."""

    def __init__(
        self, client: Client, *, task_queue: str, database_url: str, rng: random.Random
    ) -> None:
        self.client = client
        self.task_queue = task_queue
        self.database_url = database_url
        self.rng = rng
        #: how `sagacity` commands (rollback) reach this stack and its worker
        self.cli_env = cli_env(client, database_url, task_queue)
        #: the sagas started and not yet ended
        self.running: dict[str, OpsOutcome] = {}

    async def run(self, plan: OpsPlan, *, deadline: float) -> OpsOutcome:
        """Run ``plan``'s saga to its end (or the monotonic ``deadline``), then try its id again."""
        out = OpsOutcome(plan)
        workflow, arg = start_args(plan)
        handle: WorkflowHandle[Any, SagaResult] = await retrying(
            lambda: self.client.start_workflow(
                workflow, arg, id=plan.saga_id, task_queue=self.task_queue, result_type=SagaResult
            ),
            until=deadline,
        )
        out.run_id = handle.result_run_id
        self.running[plan.saga_id] = out
        # the saga's current run, whichever it is (a reset starts another)
        latest: WorkflowHandle[Any, SagaResult] = self.client.get_workflow_handle(
            plan.saga_id, result_type=SagaResult
        )
        done = asyncio.Event()
        helpers = [asyncio.create_task(self._pester(latest, out, done))]
        if plan.reuse == "while-running":
            helpers.append(asyncio.create_task(self._reuse_while_running(out)))
        if plan.fate in WITHHELD:
            helpers.append(asyncio.create_task(self._disrupt_later(latest, out, done)))
        result = asyncio.create_task(self._result(handle, out, deadline))
        try:
            while not result.done():
                if time.monotonic() > deadline:
                    out.error = "did not end in time"
                    break
                await self._answer(latest, out)
                await asyncio.wait({result}, timeout=POLL_S * self.rng.uniform(0.7, 1.3))
            else:
                out.result = result.result()
        except Exception as exc:
            out.error = _error_chain(exc)
        finally:
            self.running.pop(plan.saga_id, None)
            done.set()
            result.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await result
            await asyncio.gather(*helpers, return_exceptions=True)
        if out.result is not None:
            with contextlib.suppress(Exception):
                out.final = await retrying(
                    lambda: latest.query(
                        "status", result_type=SagaStatus, rpc_timeout=timedelta(seconds=5)
                    ),
                    until=deadline,
                )
            if out.final is None:
                # a status query replays the ended saga: say whether its history replays
                with contextlib.suppress(Exception):
                    out.unreplayable = await replay_failure(await latest.fetch_history())
            if plan.reuse == "after":
                await self._reuse_after(out, deadline=deadline)
        return out

    async def _result(
        self, handle: WorkflowHandle[Any, SagaResult], out: OpsOutcome, deadline: float
    ) -> SagaResult | None:
        """The saga's result, following a reset to the run it started; None for a saga
        terminated to be rolled back (it has no result)."""
        while True:
            try:
                return await retrying(handle.result, until=deadline)
            except WorkflowFailureError as exc:
                if not isinstance(exc.cause, TerminatedError):
                    raise
                if out.plan.fate is Fate.TERMINATE_ROLLBACK:
                    return None
                described = await retrying(
                    self.client.get_workflow_handle(out.plan.saga_id).describe, until=deadline
                )
                if described.run_id in (None, handle.result_run_id):
                    raise  # terminated, and no run after it
                handle = self.client.get_workflow_handle(
                    out.plan.saga_id, run_id=described.run_id, result_type=SagaResult
                )

    # -- the humans -------------------------------------------------------------------------------

    async def _answer(self, handle: WorkflowHandle[Any, SagaResult], out: OpsOutcome) -> None:
        """Query the saga once; decide a waiting approval as planned, or resolve a SUSPECT call."""
        try:
            status: SagaStatus = await handle.query(
                "status", result_type=SagaStatus, rpc_timeout=timedelta(seconds=2)
            )
        except Exception:
            return  # no worker (killed), or not started yet: ask later
        out.last = status
        pending, suspect, fate = status.pending_approval, status.suspect, out.plan.fate
        if pending is not None:
            out.gate_seq = pending.journal_seq
        with contextlib.suppress(RPCError, psycopg.OperationalError, asyncio.TimeoutError):
            if await self._operate(handle, status, out):
                return
            if pending is not None and pending.journal_seq not in out.decided:
                seq = pending.journal_seq
                if fate in WITHHELD:
                    return  # the abort or cancel comes when it comes
                if fate in CANCELLED:
                    await handle.cancel(rpc_timeout=timedelta(seconds=5))
                    out.disrupted = True
                elif fate is Fate.ABORT_AFTER_APPROVE:
                    await handle.signal("approve", Approve(journal_seq=seq, approver=APPROVER))
                    await handle.signal("abort", Abort(reason="chaos: right after", by=ABORTER))
                    out.disrupted = True
                elif out.plan.decide_by == "update":
                    if not await self._decide_by_update(handle, seq, out):
                        return
                else:
                    await handle.signal(*self._decision(seq, fate))
                out.decided.add(seq)
            elif status.state is SagaState.SUSPECT and suspect is not None:
                out.suspects_seen.add(suspect.call_seq)
                if any(seq == suspect.call_seq for seq, _, _ in out.resolved):
                    return
                try:
                    happened, returned = await effect_of(
                        self.database_url, out.plan.saga_id, suspect.tool_name
                    )
                except AssertionError as exc:  # the shop holds the effect twice
                    out.problems.append(str(exc))
                    return
                await handle.signal(
                    "resolve",
                    Resolve(
                        call_seq=suspect.call_seq,
                        resolver=RESOLVER,
                        happened=happened,
                        result=returned,
                    ),
                )
                out.resolved.append((suspect.call_seq, suspect.tool_name, happened))

    async def _operate(
        self, handle: WorkflowHandle[Any, SagaResult], status: SagaStatus, out: OpsOutcome
    ) -> bool:
        """The operator's move the fate plans at this point, if any: True when one was made."""
        fate, pending, sid = out.plan.fate, status.pending_approval, out.plan.saga_id
        if fate is Fate.TERMINATE_ROLLBACK and pending is not None and out.rollback is None:
            out.disrupted = True
            out.rollback = await terminate_and_roll_back(
                self.client, sid, self.cli_env, timeout=ROLLBACK_S
            )
            return True
        if fate is Fate.RESET_COMPLETE and pending is not None and out.reset_run is None:
            try:
                out.reset_run = await reset_after_first_effect(self.client, handle)
                out.disrupted = True
            except LookupError as exc:
                out.reset_run = ""  # not tried again: the saga is approved as it is
                out.problems.append(f"not reset: {exc}")
            return True
        if (
            fate is Fate.HALT_COMPENSATING
            and status.state is SagaState.COMPENSATING
            and out.hold is None
        ):
            out.disrupted = True
            out.hold = await hold_compensations(self.client, self.database_url, sid)
            return True
        return False

    def _decision(self, seq: int, fate: Fate) -> tuple[str, Approve | Reject]:
        if self._approves(fate):
            return "approve", Approve(journal_seq=seq, approver=APPROVER)
        return "reject", Reject(journal_seq=seq, approver=APPROVER, reason="chaos: no")

    @staticmethod
    def _approves(fate: Fate) -> bool:
        return fate not in (Fate.REJECT, Fate.HALT_COMPENSATING)

    async def _decide_by_update(
        self, handle: WorkflowHandle[Any, SagaResult], seq: int, out: OpsOutcome
    ) -> bool:
        """Decide through ``decide``; True once the saga has the decision (now or before)."""
        decision = Decision(
            journal_seq=seq,
            approver=APPROVER,
            approve=self._approves(out.plan.fate),
            reason="chaos: no",
        )
        try:
            await asyncio.wait_for(handle.execute_update("decide", decision, result_type=str), 10)
        except WorkflowUpdateFailedError as exc:
            cause = exc.cause
            if isinstance(cause, ApplicationError) and cause.details[:1] == ("already_decided",):
                out.updates["repeated"] += 1  # refused, and recorded as such
                return True  # an earlier try that timed out got there
            if error_type(exc) == SAGA_BUSY:
                out.updates["busy (planned decision)"] += 1
                return False  # turned away for a moment: the next look sends it again
            out.problems.append(f"the planned decision was refused: {cause}")
            return False
        except (TimeoutError, RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
            # no worker, or the decision waits to be journaled (Postgres is away): the next look
            # tries again, and learns if this one got there
            return False
        return True

    # -- the operators ------------------------------------------------------------------------------

    async def _disrupt_later(
        self, handle: WorkflowHandle[Any, SagaResult], out: OpsOutcome, done: asyncio.Event
    ) -> None:
        """ABORT and CANCEL: abort or cancel once the planned moment comes, while the saga runs."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), out.plan.disrupt_after_s)
            return
        while not done.is_set():
            try:
                if out.plan.fate is Fate.CANCEL:
                    await handle.cancel(rpc_timeout=timedelta(seconds=5))
                else:
                    await handle.signal(
                        "abort",
                        Abort(reason="chaos: at a random moment", by=ABORTER),
                        rpc_timeout=timedelta(seconds=5),
                    )
                out.disrupted = True
                return
            except RPCError:
                await asyncio.sleep(1.0)  # ended meanwhile, or Temporal did not answer

    async def _pester(
        self, handle: WorkflowHandle[Any, SagaResult], out: OpsOutcome, done: asyncio.Event
    ) -> None:
        """Send the plan's bad signals and updates at random moments while the saga runs.

        Never cancelled mid-send: a signal cancelled in flight may or may not have arrived.
        """
        plan = out.plan
        sends = ["signal"] * plan.bad_signals + ["update"] * plan.bad_updates
        sends += ["raw-signal"] * plan.raw_signals + ["raw-update"] * plan.raw_updates
        self.rng.shuffle(sends)
        for send in sends:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), self.rng.uniform(0.2, 3.0))
                return
            # the request's own seq once known: a bad payload that names it must change nothing
            seq = out.gate_seq or (5 if plan.workflow == "order" else 7)
            if send == "signal":
                await self._bad_signal(handle, out, seq)
            elif send == "update":
                await self._bad_update(handle, out, seq)
            else:
                await self._raw_decision(out, raw=send)

    async def _bad_signal(
        self, handle: WorkflowHandle[Any, SagaResult], out: OpsOutcome, seq: int
    ) -> None:
        name, payload, kind = bad_signal(self.rng, seq)
        try:
            await handle.signal(name, payload, rpc_timeout=timedelta(seconds=5))
            out.signals[kind] += 1
        except RPCError as exc:
            if exc.status == exc.status.DEADLINE_EXCEEDED:
                out.signals["unsure"] += 1

    async def _bad_update(
        self, handle: WorkflowHandle[Any, SagaResult], out: OpsOutcome, seq: int
    ) -> None:
        payload = bad_update(self.rng, seq)
        while True:
            try:
                await asyncio.wait_for(
                    handle.execute_update("decide", payload, result_type=str), 10
                )
                out.updates["accepted"] += 1
                out.problems.append(f"a bad decide update was accepted: {payload!r:.200}")
            except WorkflowUpdateFailedError as exc:
                cause, kind = exc.cause, error_type(exc)
                if kind == SAGA_BUSY and out.updates["busy"] < BUSY_TRIES:
                    # turned away, recorded nowhere: a client sends it again
                    out.updates["busy"] += 1
                    await asyncio.sleep(BUSY_AGAIN_S)
                    continue
                if kind == "ApprovalRefused":
                    out.updates["refused"] += 1
                else:
                    out.updates[f"error: {type(cause).__name__}"] += 1
                    out.problems.append(
                        f"a bad decide update failed with {type(cause).__name__}: {cause}"
                    )
            except (TimeoutError, RPCError, WorkflowUpdateRPCTimeoutOrCancelledError):
                out.updates["unanswered"] += 1
            return

    async def _raw_decision(self, out: OpsOutcome, *, raw: str) -> None:
        """A decision as bytes no client library writes, naming a request no saga has: whether
        the saga can read it or not, it must record it refused (and refuse the update, typed)."""
        kind, data = raw_decision(self.rng, NO_SUCH_SEQ)
        sid = out.plan.saga_id
        if raw == "raw-signal":
            name = self.rng.choice(["approve", "reject"])
            try:
                await send_raw_signal(self.client, sid, name, data)
                out.signals["raw"] += 1
            except RPCError as exc:
                if exc.status == exc.status.DEADLINE_EXCEEDED:
                    out.signals["unsure"] += 1
            return
        try:
            answer = await send_raw_update(self.client, sid, data)
            while answer == f"error: {SAGA_BUSY}" and out.updates["busy"] < BUSY_TRIES:
                out.updates["busy"] += 1
                await asyncio.sleep(BUSY_AGAIN_S)
                answer = await send_raw_update(self.client, sid, data)
        except (TimeoutError, RPCError):
            out.updates["unanswered"] += 1
            return
        out.updates[f"raw {answer}" if answer != "refused" else "refused"] += 1
        if answer != "refused":
            out.problems.append(f"a decide update of {kind} bytes was not refused, typed: {answer}")

    async def _reuse_while_running(self, out: OpsOutcome) -> None:
        """Start another saga under the id of this running one: Temporal refuses it."""
        workflow, arg = reuse_args(out.plan, self.rng)
        try:
            await self.client.start_workflow(
                workflow, arg, id=out.plan.saga_id, task_queue=self.task_queue
            )
        except WorkflowAlreadyStartedError:
            out.reuse.append("refused while running (WorkflowAlreadyStarted)")
            return
        except RPCError as exc:
            out.reuse.append(f"not tried: {exc}")
            return
        out.reuse.append("! a second run started under the id of a running saga")

    async def _reuse_after(self, out: OpsOutcome, *, deadline: float) -> None:
        """Start another saga under the ended saga's id: it must fail SagaIdTaken, running nothing."""
        sid = out.plan.saga_id
        workflow, arg = reuse_args(out.plan, self.rng)
        try:
            before = await retrying(lambda: footprint(self.database_url, sid), until=deadline)
            again: WorkflowHandle[Any, SagaResult] = await retrying(
                lambda: self.client.start_workflow(
                    workflow, arg, id=sid, task_queue=self.task_queue, result_type=SagaResult
                ),
                until=deadline,
            )
            try:
                result = await asyncio.wait_for(
                    retrying(again.result, until=deadline), max(1.0, deadline - time.monotonic())
                )
                out.reuse.append(f"! {workflow} under a used id ran and ended {result.status}")
            except WorkflowFailureError as exc:
                cause = exc.cause
                if isinstance(cause, ApplicationError) and cause.type == "SagaIdTaken":
                    out.reuse.append(f"{workflow}: refused (SagaIdTaken)")
                else:
                    out.reuse.append(f"! {workflow} under a used id failed otherwise: {cause}")
            after = await retrying(lambda: footprint(self.database_url, sid), until=deadline)
        except Exception as exc:
            out.reuse.append(f"! reusing the id went wrong: {type(exc).__name__}: {exc}")
            return
        for name in before:
            if before[name] != after[name]:
                out.reuse.append(
                    f"! the refused run changed {name}: {before[name]} -> {after[name]}"
                )
