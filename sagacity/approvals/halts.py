"""The kill switch: halt new side effects now, report what is live, lift the halt again.

A halt is written first (from then on no INTENT it covers is written, whatever any worker
knows), then the running sagas it covers are told by a ``halt`` signal, so that under the
``compensate`` policy they abort at once. The halt report, the blast radius, is read from the
journal once calls already running have finished, and signed like the halt itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError

from sagacity.errors import InvalidInput
from sagacity.evidence.decisions import (
    HALT_SUBJECT,
    DecisionKind,
    Keyring,
    Signature,
    Signer,
    Statement,
    halt_statement,
    signer_refusal,
)
from sagacity.journal import input_hash, read_calls, to_json
from sagacity.journal.calls import Liveness
from sagacity.store.halts import Halt, HaltKind, HaltNotFound, HaltPolicy, HaltScope, HaltStore
from sagacity.store.journal import JournalStore
from sagacity.temporal.models import MAX_HALT_SCOPE_CHARS, HaltNotice, Resume

__all__ = [
    "HALT_SUBJECT",
    "HaltLiveness",
    "HaltReport",
    "HaltResult",
    "HaltService",
    "LiveEffect",
    "halt_problems",
]


#: a live effect as a halt reports it: as the journal has it, or ``compensating``: it took
#: effect (or may have) and its undo was running, which no halt stops part-way
HaltLiveness = Liveness | Literal["compensating"]


class LiveEffect(BaseModel):
    """An effect a halt found in the world: a call not compensated that took effect, may
    have, or was still running (the call, or its compensation) when the report was taken."""

    saga_id: str
    seq: int = Field(description="the call's INTENT seq")
    tool: str
    state: HaltLiveness


class HaltReport(BaseModel):
    """The blast radius of a halt: every live effect in the sagas it reached, signed."""

    halt_id: int
    taken_at: datetime
    sagas: list[str]
    live: list[LiveEffect]
    signature: Signature | None = None

    def body(self) -> str:
        """The canonical JSON the signature covers (everything but the signature)."""
        return to_json(self.model_dump(mode="json", exclude={"signature"}))

    def statement(self, operator: str) -> Statement:
        """What the halting operator's signature on this report vouches for."""
        return Statement(
            saga_id=HALT_SUBJECT,
            seq=self.halt_id,
            input_hash=input_hash(self.body()),
            decision="halt_report",
            principal=operator,
        )


class HaltResult(BaseModel):
    """What ``halt`` did: the halt written, the sagas told, the report."""

    halt_id: int
    halted_at: datetime
    signed: bool
    signalled: list[str]
    report: HaltReport
    #: a scope that may match nothing (a misspelt tool or task queue): the halt is in force
    warnings: list[str] = Field(default_factory=list)


class HaltService:
    """Halts and lifts as a named operator; statements signed with ``signer`` (refused when
    ``keyring`` is configured and would not trust it for that operator)."""

    def __init__(
        self,
        client: Client,
        halts: HaltStore,
        journal: JournalStore,
        *,
        signer: Signer | None = None,
        keyring: Keyring | None = None,
        concurrency: int = 32,
    ) -> None:
        self._client = client
        self._halts = halts
        self._journal = journal
        self.signer = signer
        self.keyring = keyring
        self._concurrency = concurrency

    async def halt(
        self,
        *,
        scope: HaltScope,
        policy: HaltPolicy,
        reason: str,
        operator: str,
        kind: HaltKind = "halt",
        settle: timedelta = timedelta(seconds=10),
    ) -> HaltResult:
        """Halt what ``scope`` covers; returns once the sagas are told and the report taken.

        ``settle``: how long calls and compensations running at halt time get to finish
        before the report (one still running then is reported ``in_flight`` or
        ``compensating``). A compensation that had started its undo goes on to the end and is
        journaled; under ``keep`` the next one waits for the halt to be lifted.
        """
        _check_text(reason=reason, operator=operator)
        if scope.task_queue is not None:
            _quoted(scope.task_queue)  # refused before anything is written
        statement = _statement(kind, scope, policy, "halt", operator, reason)
        signature = self._sign(statement, operator)
        halt = await self._halts.halt(
            kind=kind,
            scope=scope,
            policy=policy,
            reason=reason,
            operator=operator,
            signature=_stored(signature),
        )
        sagas = await self.reached(scope)
        # the scope and signature prove the halt to the sagas, which look in the store first
        # (a scope too long for a signal is left to the store)
        proof = len(to_json(scope.as_json())) <= MAX_HALT_SCOPE_CHARS
        notice = HaltNotice(
            halt_id=halt.id,
            kind=kind,
            policy=policy,
            reason=reason,
            operator=operator,
            scope=scope.as_json() if proof else None,
            signature=signature if proof else None,
        )
        # a tool-wide halt holds sagas at that tool only: it aborts none of the others
        tell = scope.tool is None
        told = await self._signal(sagas, "halt", notice) if tell else []
        await self._settle([s for s, _ in sagas], scope.tool, settle)
        if scope.sagas is None:
            # visibility trails a saga that has just started: look again once calls settled
            later = [s for s in await self.reached(scope) if s not in sagas]
            sagas += later
            if tell and later:
                told = sorted([*told, *await self._signal(later, "halt", notice)])
        report = await self._report(halt, [s for s, _ in sagas])
        warnings = []
        if scope.task_queue is not None and not sagas:
            warnings.append(f"no running saga is on task queue {scope.task_queue!r}: misspelt?")
        if scope.tool is not None and await self._journal.names_tool(scope.tool) is False:
            warnings.append(f"no journal row names tool {scope.tool!r}: misspelt?")
        return HaltResult(
            halt_id=halt.id,
            halted_at=halt.halted_at,
            signed=signature is not None,
            signalled=told,
            report=report,
            warnings=warnings,
        )

    async def resume(self, halt_id: int, *, by: str, reason: str) -> tuple[Halt, list[str]]:
        """Lift halt ``halt_id`` and wake the sagas it held; (the halt, the sagas told)."""
        _check_text(reason=reason, operator=by)
        current = await self._halts.get(halt_id)
        if current is None or not current.active:
            raise HaltNotFound(f"no active halt {halt_id} (see `sagacity halts`)")
        statement = _lift_statement(current, by, reason)
        halt = await self._halts.lift(
            halt_id, by=by, reason=reason, signature=_stored(self._sign(statement, by))
        )
        told = await self._signal(
            await self.reached(halt.scope, running_only=True),
            "resume",
            Resume(halt_id=halt_id, operator=by),
        )
        return halt, told

    async def reached(
        self, scope: HaltScope, *, running_only: bool = False
    ) -> list[tuple[str, str]]:
        """``(saga_id, workflow_id)`` of the sagas ``scope`` covers: the named ones, else the
        running saga workflows (of its task queue), from Temporal's visibility."""
        if scope.sagas is not None and not running_only:
            owned = dict(await self._journal.owners(saga_ids=scope.sagas))
            # a saga that never claimed its journal runs under its own id
            return [(s, owned.get(s, s)) for s in scope.sagas]
        query = 'ExecutionStatus="Running"'
        if scope.task_queue is not None:
            query += f' AND TaskQueue="{_quoted(scope.task_queue)}"'
        owners = await self.reached_by_query(query)
        if scope.sagas is not None:
            owners = [o for o in owners if o[0] in scope.sagas]
        return owners

    async def reached_by_query(self, query: str) -> list[tuple[str, str]]:
        """``(saga_id, workflow_id)`` of the sagas whose workflows a visibility query finds."""
        try:
            found = [w.id async for w in self._client.list_workflows(query)]
        except RPCError as err:
            raise InvalidInput(
                f"the visibility query {query!r} was refused: {err.message}"
            ) from None
        owned = await self._journal.owners(workflow_ids=found)
        # a saga whose first task has not run yet has no journal: it runs under its own id
        claimed = {w for _, w in owned}
        return sorted([*owned, *((w, w) for w in found if w not in claimed)])

    async def active(self) -> list[Halt]:
        """The halts in force, newest first."""
        return await self._halts.list(active=True)

    async def listing(self, *, active: bool) -> list[tuple[Halt, list[str]]]:
        """Halts, newest first (only those in force with ``active``), each with what does not
        hold about it (:func:`halt_problems`)."""
        found = await self._halts.list(active=active)
        enforced = await self._halts.enforced()
        everything = found if not active else await self._halts.list(active=False)
        return [
            (h, halt_problems(h, self.keyring, enforced=enforced, others=everything)) for h in found
        ]

    async def _signal(
        self, sagas: Sequence[tuple[str, str]], name: str, payload: BaseModel
    ) -> list[str]:
        """Send ``name`` to each saga's workflow; the ones that took it (closed ones do not)."""
        gate = asyncio.Semaphore(self._concurrency)
        data = payload.model_dump(mode="json", exclude_none=True)

        async def one(saga_id: str, workflow_id: str) -> str | None:
            async with gate:
                try:
                    await self._client.get_workflow_handle(workflow_id).signal(name, data)
                except RPCError:
                    return None  # closed, or gone: nothing there to hold
                return saga_id

        told = await asyncio.gather(*(one(s, w) for s, w in sagas))
        return sorted(s for s in told if s is not None)

    async def _settle(self, sagas: list[str], tool: str | None, settle: timedelta) -> None:
        """Wait up to ``settle`` for the calls and compensations running in ``sagas`` to have
        their row."""
        deadline = asyncio.get_running_loop().time() + settle.total_seconds()
        while sagas and asyncio.get_running_loop().time() < deadline:
            # only the sagas with a call or an undo still running are read again
            live = await self._live(sagas, tool)
            sagas = sorted({e.saga_id for e in live if e.state in _RUNNING})
            if sagas:
                await asyncio.sleep(0.25)

    async def _report(self, halt: Halt, sagas: list[str]) -> HaltReport:
        live = await self._live(sagas, halt.scope.tool)
        report = HaltReport(
            halt_id=halt.id, taken_at=datetime.now(UTC), sagas=sorted(sagas), live=live
        )
        report.signature = self._sign(report.statement(halt.operator), halt.operator, checked=True)
        await self._halts.set_report(halt.id, report.model_dump(mode="json"))
        return report

    async def _live(self, sagas: list[str], tool: str | None) -> list[LiveEffect]:
        found = []
        for saga_id in sorted(sagas):
            effects = [
                LiveEffect(
                    saga_id=saga_id, seq=call.intent.seq, tool=call.intent.tool_name, state=state
                )
                for call in read_calls(await self._journal.read(saga_id))
                if (state := call.live) is not None and tool in (None, call.intent.tool_name)
            ]
            undoing = set(
                await self._journal.undoing(
                    saga_id, [e.seq for e in effects if e.state != "in_flight"]
                )
            )
            for effect in effects:
                if effect.seq in undoing:
                    effect.state = "compensating"
            found += effects
        return found

    def _sign(
        self, statement: Statement, operator: str, *, checked: bool = False
    ) -> Signature | None:
        """The signature as stored; refused up front (nothing written) when a keyring would
        not trust it. ``checked``: the operator's key was checked for this halt already."""
        if not checked:
            why = signer_refusal(self.signer, self.keyring, operator)
            if why is not None:
                raise InvalidInput(f"refused: {why}")
        return None if self.signer is None else self.signer.sign(statement)


#: what a halt's report waits for (up to its ``settle``): a call or an undo still running
_RUNNING = frozenset({"in_flight", "compensating"})


def _stored(signature: Signature | None) -> dict[str, Any] | None:
    return None if signature is None else signature.model_dump()


def _statement(
    kind: HaltKind,
    scope: HaltScope,
    policy: HaltPolicy,
    decision: DecisionKind,
    operator: str,
    reason: str,
    *,
    seq: int = 0,
) -> Statement:
    """What an operator signs: the halt (its kind, scope and policy, by hash) and why. A halt
    is signed before it has an id (``seq`` 0); lifting it names it."""
    return halt_statement(
        kind=kind,
        policy=policy,
        scope=scope.as_json(),
        operator=operator,
        reason=reason,
        decision=decision,
        seq=seq,
    )


#: how far a halt's recorded time may be from when its statement was signed
_SIGNED_NEAR = timedelta(minutes=5)


def _lift_statement(halt: Halt, by: str, reason: str) -> Statement:
    """What the operator lifting ``halt`` signs: that halt, by its id, and why."""
    return _statement(halt.kind, halt.scope, halt.policy, "resume", by, reason, seq=halt.id)


def halt_problems(
    halt: Halt,
    keyring: Keyring | None,
    *,
    enforced: set[int] | None = None,
    others: Sequence[Halt] = (),
) -> list[str]:
    """What does not hold about a stored halt (empty: nothing found).

    ``enforced``: the halts the gate row holds; an active halt missing there refuses nothing.
    With ``keyring``: each signature must verify, the halt's and its lifting's times must be
    when they were signed, a signed halt must have its report, and no other halt of ``others``
    may carry the same signature (a copy).
    """
    problems = []
    if enforced is not None and halt.active and halt.id not in enforced:
        problems.append("not in the gate: it refuses nothing (the gate row was changed)")
    if keyring is None:
        return problems
    if halt.signature is not None and halt.report is None:
        problems.append("its report is missing")
    for other in others:
        if other.id != halt.id and halt.signature and other.signature == halt.signature:
            problems.append(f"its signature is also on halt {other.id}: one of them is a copy")
    for what, raw, when in (
        ("the halt", halt.signature, halt.halted_at),
        ("its lifting", halt.lift_signature, halt.lifted_at),
    ):
        signed = _signed_at(raw)
        if when is not None and signed is not None and abs(when - signed) > _SIGNED_NEAR:
            problems.append(f"{what}: recorded at {when.isoformat()}, signed at {signed}")
    checks: list[tuple[str, Statement, dict[str, Any] | None]] = [
        (
            "the halt",
            _statement(halt.kind, halt.scope, halt.policy, "halt", halt.operator, halt.reason),
            halt.signature,
        )
    ]
    if halt.lifted_at is not None:
        checks.append(
            (
                "its lifting",
                _lift_statement(halt, halt.lifted_by or "", halt.lift_reason or ""),
                halt.lift_signature,
            )
        )
    report: HaltReport | None = None
    if halt.report is not None:
        try:
            report = HaltReport.model_validate(halt.report)
        except ValidationError:
            problems.append("its report: not a halt report (changed after it was signed)")
    if report is not None:
        checks.append(
            (
                "its report",
                report.statement(halt.operator),
                report.signature.model_dump() if report.signature else None,
            )
        )
    for what, statement, raw in checks:
        try:
            signature = Signature.model_validate(raw) if raw is not None else None
        except ValidationError:
            problems.append(f"{what}: its signature is not a signature (changed after signing)")
            continue
        why = keyring.refusal(statement, signature)
        if why is not None:
            problems.append(f"{what}: {why}")
    return problems


def _signed_at(raw: dict[str, Any] | None) -> datetime | None:
    try:
        return datetime.fromisoformat(Signature.model_validate(raw).signed_at) if raw else None
    except (ValidationError, ValueError):
        return None  # reported where the signature is checked


def _check_text(*, reason: str, operator: str) -> None:
    for name, value, most in (("reason", reason, 2000), ("operator", operator, 200)):
        if not value.strip() or not value.isprintable() or len(value) > most:
            raise InvalidInput(
                f"the {name} must be plain, printable, non-empty text of {most} characters at most"
            )


def _quoted(value: str) -> str:
    if '"' in value or "\\" in value:
        raise InvalidInput("a task queue named in a halt may not contain quotes or backslashes")
    return value
