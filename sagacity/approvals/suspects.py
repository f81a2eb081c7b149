"""SUSPECT calls as people see them, and resolutions sent through the saga's ``resolve`` signal.

A call is SUSPECT when the worker running it died mid-call, the tool is not idempotent, and the
journal does not say whether it took effect: an INTENT row with no EXECUTED or FAILED after it.
The saga stops until a human says what happened. ``resolve`` is a signal, and a signal gets no
answer, so :func:`resolve_suspect` checks the saga's ``status`` query before sending (for a
precise refusal, and nothing sent), then watches the query, for a bounded time, until the SUSPECT
call is gone (the saga took the resolution) or a new entry of ``refused_decisions`` names the
resolver (it refused it).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import timedelta
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError
from temporalio.client import Client
from temporalio.service import RPCError, RPCStatusCode

from sagacity.approvals.live import Live, live_status
from sagacity.errors import (
    DecisionUnsigned,
    InvalidInput,
    ResolverNotAllowed,
    SagaNotFound,
    SagaUnavailable,
    SuspectConflict,
    SuspectNotFound,
)
from sagacity.evidence.decisions import Keyring, Signer, allowed, signer_refusal
from sagacity.inputs import check_json, check_name, invalid
from sagacity.journal import Phase
from sagacity.store.journal import JournalStore
from sagacity.temporal.models import (
    Compensating,
    Resolve,
    SagaState,
    SagaStatus,
    resolution_statement,
)
from sagacity.temporal.undo_attempts import FAILING_AFTER, failing, with_attempts

__all__ = ["Resolution", "SagaView", "SuspectView", "resolve_suspect", "saga_view"]

#: how long :func:`resolve_suspect` watches for the saga to take (or refuse) a resolution
RESOLVE_WAIT = timedelta(seconds=10)
_POLL_S = 0.2
_OUTCOMES = frozenset({Phase.EXECUTED, Phase.FAILED})


class SuspectView(BaseModel):
    """A call with no outcome, waiting for a human to say whether it took effect."""

    call_seq: int = Field(description="seq of the call's INTENT row, the one with no outcome")
    tool_name: str
    reason: str = Field(description="why the saga cannot tell by itself")
    input: str | None = Field(
        default=None,
        description="the call's input as its INTENT row journaled it (redacted); null when the "
        "journal was not read",
    )


class SagaView(BaseModel):
    """A saga as its workflow reports it now: what it waits for, SUSPECT call included."""

    saga_id: str
    workflow_status: str = Field(
        description="running; completed, failed, terminated, … once closed; no_answer when the "
        "saga did not answer its status query (no worker polling its task queue)"
    )
    state: SagaState | None = Field(default=None, description="while running")
    outcome: SagaState | None = Field(
        default=None,
        description="how the saga ended (completed, compensated, …), once its workflow completed",
    )
    head_seq: int | None = Field(default=None, description="the journal's last seq, while running")
    running: str | None = Field(default=None, description="the tool whose call is in flight")
    pending_approval_seq: int | None = Field(
        default=None, description="seq of the AWAITING_APPROVAL row the saga waits on"
    )
    suspect: SuspectView | None = Field(
        default=None, description="the SUSPECT call the saga waits to have resolved"
    )
    refused_decisions: list[str] = Field(
        default_factory=list, description="decisions and resolutions the saga refused"
    )
    needs_attention: str | None = None
    compensating: Compensating | None = Field(
        default=None,
        description="the compensation running now, while the saga compensates: its attempt and "
        "the previous attempt's error",
    )
    compensation_failing: bool = Field(
        default=False,
        description=f"the running compensation has failed {FAILING_AFTER} attempts and is "
        "still retried: it may never succeed, and its effect stays live meanwhile",
    )


class Resolution(BaseModel):
    """A resolution the saga took."""

    saga_id: str
    call_seq: int
    tool_name: str
    happened: bool
    resolver: str
    outcome: Literal["EXECUTED", "FAILED"] | None = Field(
        description="the phase journaled at call_seq + 1 (the resolution's, or an outcome the "
        "lost attempt wrote after all); null when it was not seen within the wait"
    )


async def saga_view(
    client: Client,
    saga_id: str,
    *,
    journal: JournalStore | None = None,
    rpc_timeout: timedelta = timedelta(seconds=5),
) -> SagaView:
    """What ``saga_id`` says now; :class:`SagaNotFound`, or :class:`SagaUnavailable` if silent."""
    live = await live_status(client, saga_id, rpc_timeout)
    status = _running(saga_id, live, closed_ok=True)
    if status is None:
        return SagaView(saga_id=saga_id, workflow_status=live.workflow_status, outcome=live.outcome)
    suspect = None
    if status.suspect is not None:
        entry = None if journal is None else await journal.get(saga_id, status.suspect.call_seq)
        suspect = SuspectView(
            call_seq=status.suspect.call_seq,
            tool_name=status.suspect.tool_name,
            reason=status.suspect.reason,
            input=entry.input if entry is not None and entry.phase is Phase.INTENT else None,
        )
    if status.compensating is not None:
        with suppress(RPCError):  # how its attempts went is extra: the status stands without
            status = await with_attempts(client, status)
    pending = status.pending_approval
    return SagaView(
        saga_id=saga_id,
        workflow_status=live.workflow_status,
        state=status.state,
        head_seq=status.head.seq,
        running=status.running,
        pending_approval_seq=pending.journal_seq if pending is not None else None,
        suspect=suspect,
        refused_decisions=status.refused_decisions,
        needs_attention=status.needs_attention,
        compensating=status.compensating,
        compensation_failing=failing(status.compensating),
    )


def check_resolution(resolver: str, happened: bool, result: Any) -> None:
    """Refuse, before anything is sent, what the saga could not take or would misread."""
    check_name(resolver, what="the resolver")
    if not happened and result is not None:
        raise InvalidInput("a result is only for a call that happened")
    check_json(result, what="the result")


async def resolve_suspect(
    client: Client,
    saga_id: str,
    call_seq: int,
    *,
    resolver: str,
    happened: bool,
    result: Any = None,
    journal: JournalStore | None = None,
    wait: timedelta = RESOLVE_WAIT,
    rpc_timeout: timedelta = timedelta(seconds=5),
    resolvers: Mapping[str, Sequence[str]] | None = None,
    signer: Signer | None = None,
    keyring: Keyring | None = None,
) -> Resolution:
    """Tell the saga whether its SUSPECT call at ``call_seq`` took effect, and see it taken.

    Raises :class:`InvalidInput` (bad resolver or result), :class:`SagaNotFound`,
    :class:`SuspectNotFound` (no SUSPECT call at that seq), :class:`SuspectConflict` (already
    resolved, the saga ended, or it refused the resolution) and :class:`SagaUnavailable` (the
    saga did not answer, or has not taken the resolution within ``wait``: it will when a
    worker runs it). ``outcome`` is read from ``journal`` when given, else from the saga.
    ``resolvers`` is the policy checked first (:class:`ResolverNotAllowed`); ``signer`` signs
    the resolution over the SUSPECT call's INTENT row hash, as ``keyring`` requires.
    """
    check_resolution(resolver, happened, result)
    try:
        resolution = Resolve(call_seq=call_seq, resolver=resolver, happened=happened, result=result)
    except ValidationError as exc:
        raise invalid(exc, what="the resolution") from None
    live = await live_status(client, saga_id, rpc_timeout)
    status = _running(saga_id, live)
    assert status is not None
    suspect = _suspect_at(saga_id, call_seq, status)
    if not allowed(resolvers, resolver, suspect.tool_name):
        raise ResolverNotAllowed(f"{resolver!r} may not resolve {suspect.tool_name!r} calls")
    unsigned = signer_refusal(signer, keyring, resolver)
    if unsigned is not None:
        raise DecisionUnsigned(unsigned)
    if signer is not None and status.suspect is not None:
        statement = resolution_statement(saga_id, status.suspect.intent_hash, resolution)
        resolution = resolution.model_copy(update={"signature": signer.sign(statement)})
    seen_refusals = len(status.refused_decisions)
    try:
        await client.get_workflow_handle(saga_id).signal(
            "resolve", resolution, rpc_timeout=rpc_timeout
        )
    except RPCError as err:
        if err.status is RPCStatusCode.NOT_FOUND:  # it ended since the check
            raise SuspectConflict("not_waiting", f"saga {saga_id!r} has ended") from None
        raise SagaUnavailable(f"saga {saga_id!r}: {err.message}") from err

    loop = asyncio.get_running_loop()
    deadline = loop.time() + wait.total_seconds()
    while True:
        live = await live_status(client, saga_id, rpc_timeout)
        if live.status is not None:
            mine = [
                refusal
                for refusal in live.status.refused_decisions[seen_refusals:]
                if refusal.startswith(f"{resolver}:")
            ]
            if mine:
                raise SuspectConflict(
                    "refused", f"saga {saga_id!r} refused the resolution: {mine[-1]}"
                )
            now = live.status.suspect
            if now is None or now.call_seq != call_seq:
                break
        elif live.workflow_status == "completed":
            break  # a saga waiting on a SUSPECT call ends only once it has taken a resolution
        elif live.workflow_status != "no_answer":
            raise SuspectConflict(
                "not_waiting",
                f"saga {saga_id!r} ended ({live.workflow_status}) before it took the resolution",
            )
        if loop.time() >= deadline:
            raise SagaUnavailable(
                f"the resolution was sent, but saga {saga_id!r} has not taken it within "
                f"{wait.total_seconds():g} s; it will once a worker runs it (see its status)"
            )
        await asyncio.sleep(_POLL_S)
    outcome, payload = await _outcome(client, saga_id, call_seq, journal, deadline, rpc_timeout)
    if payload is not None and _resolved_by_another(outcome, payload, resolver):
        # two resolutions reached the saga together and it took the other one
        raise SuspectConflict(
            "refused",
            f"saga {saga_id!r} took another resolution sent at the same time, not yours: "
            f"{outcome} at seq {call_seq + 1} says {payload}",
        )
    return Resolution(
        saga_id=saga_id,
        call_seq=call_seq,
        tool_name=suspect.tool_name,
        happened=happened,
        resolver=resolver,
        outcome=outcome,
    )


def _resolved_by_another(outcome: str | None, payload: str, resolver: str) -> bool:
    """Whether the journaled outcome row records a resolution by someone else.

    The saga writes ``{"resolved_by": …, "result": …}`` with EXECUTED, and ``{"type":
    "SuspectResolved", "message": "<resolver>: …"}`` with FAILED; any other payload is the lost
    attempt's own outcome, or an abort's.
    """
    try:
        row = json.loads(payload)
    except ValueError:
        return False
    if not isinstance(row, dict):
        return False
    if outcome == "EXECUTED" and isinstance(row.get("resolved_by"), str):
        return bool(row["resolved_by"] != resolver)
    message = row.get("message")
    if outcome == "FAILED" and row.get("type") == "SuspectResolved" and isinstance(message, str):
        return message.endswith("the call did not happen") and not message.startswith(
            f"{resolver}: "
        )
    return False


def _running(saga_id: str, live: Live, *, closed_ok: bool = False) -> SagaStatus | None:
    """The live status; raises for a missing or silent saga, and for a closed one unless ok."""
    if live.workflow_status == "not_found":
        raise SagaNotFound(f"no saga {saga_id!r}")
    if live.workflow_status == "no_answer":
        raise SagaUnavailable(f"saga {saga_id!r} did not answer: {live.detail}")
    if live.status is None and not closed_ok:
        raise SuspectConflict("not_waiting", f"saga {saga_id!r} has ended ({live.ended})")
    return live.status


def _suspect_at(saga_id: str, call_seq: int, status: SagaStatus) -> SuspectView:
    suspect = status.suspect
    if suspect is not None and suspect.call_seq == call_seq:
        return SuspectView(call_seq=call_seq, tool_name=suspect.tool_name, reason=suspect.reason)
    rows = {row.seq: row for row in status.rows}
    intent, outcome = rows.get(call_seq), rows.get(call_seq + 1)
    if intent is not None and intent.phase is Phase.INTENT:
        # a call's INTENT is in the saga's rows only once it has an outcome, or, for a SUSPECT
        # call, once a resolution was taken and its outcome is being journaled
        journaled = (
            f"{outcome.phase.value} at seq {call_seq + 1}"
            if outcome is not None and outcome.phase in _OUTCOMES
            else "being journaled"
        )
        raise SuspectConflict(
            "already_resolved",
            f"the call at seq {call_seq} of saga {saga_id!r} already has its outcome: {journaled}",
        )
    where = (
        f"its SUSPECT call is at seq {suspect.call_seq}"
        if suspect is not None
        else f"state: {status.state.value}"
    )
    raise SuspectNotFound(f"saga {saga_id!r} has no SUSPECT call at seq {call_seq} ({where})")


async def _outcome(
    client: Client,
    saga_id: str,
    call_seq: int,
    journal: JournalStore | None,
    deadline: float,
    rpc_timeout: timedelta,
) -> tuple[Literal["EXECUTED", "FAILED"] | None, str | None]:
    """The phase journaled right after the call's INTENT, once it is there (until ``deadline``),
    and its payload when read from the journal."""
    loop = asyncio.get_running_loop()
    while True:
        phase: Phase | None = None
        payload: str | None = None
        if journal is not None:
            entry = await journal.get(saga_id, call_seq + 1)
            if entry is not None:
                phase, payload = entry.phase, entry.payload
        else:
            live = await live_status(client, saga_id, rpc_timeout)
            if live.status is None:
                return None, None  # closed: only the journal can tell now
            phase = next((r.phase for r in live.status.rows if r.seq == call_seq + 1), None)
        if phase == Phase.EXECUTED:
            return "EXECUTED", payload
        if phase == Phase.FAILED:
            return "FAILED", payload
        if loop.time() >= deadline:
            return None, None
        await asyncio.sleep(_POLL_S)
