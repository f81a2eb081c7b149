"""SUSPECT calls: a call with no outcome waits for a human to say whether it took effect.

The ``resolve`` signal carries that word; it is taken when the resolver may resolve the tool
and (with a keyring) its signature verifies, else refused and recorded. The outcome row the
worker writes records it.
"""

from __future__ import annotations

from typing import Any

from temporalio import workflow

from sagacity.evidence.decisions import allowed
from sagacity.journal.phases import Phase
from sagacity.journal.results import resolution_payload
from sagacity.temporal.models import (
    CallOutcome,
    CallStatus,
    ErrorInfo,
    Journaled,
    Resolve,
    RowDraft,
    RowRef,
    SagaState,
    Suspect,
    failure_payload,
    resolution_statement,
)
from sagacity.temporal.saga.controls import Controls
from sagacity.temporal.saga.core import SagaCore
from sagacity.temporal.saga.journal import Journal
from sagacity.temporal.saga.signals import Refusals


class Suspects:
    """The SUSPECT call, if one waits, and the resolution taken (or come early) for it."""

    def __init__(
        self, core: SagaCore, refusals: Refusals, controls: Controls, journal: Journal
    ) -> None:
        self._core = core
        self._refusals = refusals
        self._controls = controls
        self._journal = journal
        self.suspect: Suspect | None = None
        self._resolution: Resolve | None = None
        self._early_resolution: Resolve | None = None

    def on_resolve(self, *payloads: Any) -> None:
        resolution = self._refusals.parse("resolve", Resolve, payloads)
        if resolution is None:
            return
        core = self._core
        if self.suspect is None and core.running and resolution.call_seq == core.head.seq + 1:
            # the call's failure and this signal can reach the workflow in one activation, the
            # signal first (a worker replaying history): keep it for when the call goes SUSPECT
            self._early_resolution = resolution
            return
        self._take_resolution(resolution)

    def _take_resolution(self, resolution: Resolve) -> None:
        """Take a resolution of the SUSPECT call, or refuse it (recorded) and change nothing."""
        suspect, refuse = self.suspect, self._refusals.refuse
        if suspect is None or suspect.call_seq != resolution.call_seq:
            refuse(resolution.resolver, f"no SUSPECT call at seq {resolution.call_seq}")
            return
        if self._resolution is not None:
            # two resolutions in one activation: the first one taken stands
            refuse(
                resolution.resolver,
                f"the SUSPECT call at seq {resolution.call_seq} is already resolved "
                f"by {self._resolution.resolver}",
            )
            return
        if not allowed(self._core.policy.resolvers, resolution.resolver, suspect.tool_name):
            refuse(
                resolution.resolver,
                f"{resolution.resolver!r} may not resolve {suspect.tool_name!r} calls",
            )
            return
        keyring = self._core.keyring
        if keyring is not None:
            why = keyring.refusal(
                resolution_statement(self._core.saga_id, suspect.intent_hash, resolution),
                resolution.signature,
            )
            if why is not None:
                refuse(resolution.resolver, f"resolution refused: {why}")
                return
        self._resolution = resolution

    def finished(self, seq: int) -> None:
        """The call at ``seq`` finished by itself: a resolution that came early is refused."""
        early, self._early_resolution = self._early_resolution, None
        if early is not None:
            self._refusals.refuse(
                early.resolver, f"the call at seq {seq} finished by itself; not SUSPECT"
            )

    async def resolve(
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
        core, controls = self._core, self._controls
        core.enter(SagaState.SUSPECT, tool)
        self.suspect = Suspect(
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
        workflow.logger.warning("saga %s: call seq %d of %s is SUSPECT", core.saga_id, seq, tool)
        await controls.wait(lambda: self._resolution is not None or controls.abort is not None)
        resolution = self._resolution or Resolve(
            call_seq=seq,
            resolver=(controls.abort.by if controls.abort else None) or "sagacity",
            happened=False,
            result=None,
        )
        unknown = self._resolution is None  # aborted before anyone knew
        spoken = self._resolution
        self.suspect = None
        core.enter(SagaState.RUNNING)
        intent = RowRef(seq=seq, tool_name=tool, phase=Phase.INTENT, hash=intent_hash)
        core.track([intent])  # the INTENT row was written by the attempt that died
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
        resolved = await self._journal.record_outcome(seq, row, approval_seq, spoken)
        core.track(resolved.outcome.rows[1:])
        written = resolved.outcome.error
        if written is not None and written.type == "ResolutionRefused":
            # the worker refused the human's word (its keyring or policy): effect unknown
            return resolved.outcome
        if not resolved.recorded:
            # the lost attempt had finished after all: its own outcome row stands
            workflow.logger.warning(
                "saga %s: call seq %d already had an outcome; %s's resolution not written",
                core.saga_id,
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
