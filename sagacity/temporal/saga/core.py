"""The state every part of the saga engine shares: identity, journal head, state, catalog, flags.

Each part keeps its own fields; what more than one part reads or writes lives here, in one
:class:`SagaCore` the parts are given (they never reach into each other's fields).
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from temporalio import workflow

from sagacity.evidence.decisions import Keyring, Policy
from sagacity.temporal import visibility
from sagacity.temporal.models import (
    STATUS_ROWS,
    Effect,
    ErrorInfo,
    Head,
    RowRef,
    SagaCarry,
    SagaOptions,
    SagaState,
    ToolSpec,
)
from sagacity.temporal.waits import JOURNAL_HEARTBEAT

# activity error types that mean "the journal holds rows this run has not seen"
AHEAD = frozenset({"JournalAhead", "SeqConflict", "SeqTaken"})


class Desync(Exception):
    """An activity found the journal ahead of this run: re-read it, then try again."""


def loads(text: str) -> Any:
    """A journal row's JSON text as data (the text itself when it is not JSON)."""
    try:
        return json.loads(text) if text else None
    except ValueError:
        return text


@dataclass(slots=True)
class SagaCore:
    """One saga's shared state inside its workflow."""

    saga_id: str
    options: SagaOptions
    state: SagaState = SagaState.RUNNING
    head: Head = field(default_factory=Head)
    #: the newest rows (at most STATUS_ROWS)
    rows: list[RowRef] = field(default_factory=list)
    executed: list[Effect] = field(default_factory=list)
    #: tool failures seen, even those the caller caught and carried on from
    failures: list[ErrorInfo] = field(default_factory=list)
    needs_attention: str | None = None
    #: calls (and the compensation) take it in turn: each saga's journal order is the order of
    #: execution
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    catalog: dict[str, ToolSpec] | None = None
    #: the catalog lacks descriptions and schemas (see ``Saga.tools``)
    brief: bool = False
    #: the worker's keyring and policy, as ``open_saga`` recorded them in the history
    keyring: Keyring | None = None
    policy: Policy = field(default_factory=Policy)
    #: the saga shows its state in search attributes, as ``open_saga`` recorded it, and what
    #: it shows now (state, waiting tool)
    visible: bool = False
    shown: tuple[SagaState, str | None] | None = None
    #: the saga is ending: the next call (``call_last``) or compensation may be its last row
    ending: bool = False
    #: the saga chose to compensate: no call that has not started yet may start
    compensating: bool = False
    #: the tool whose call runs now
    running: str | None = None

    @classmethod
    def start(cls, saga_id: str, options: SagaOptions, carry: SagaCarry | None) -> SagaCore:
        """A new saga's core, or one that goes on from ``carry`` (continue-as-new)."""
        if carry is None:
            return cls(saga_id, options)
        return cls(
            saga_id,
            options,
            head=carry.head,
            rows=list(carry.rows),
            failures=list(carry.failures),
            needs_attention=carry.needs_attention,
        )

    def track(self, rows: list[RowRef]) -> None:
        """Take rows the journal now holds after the head (others are already seen)."""
        for row in rows:
            if row.seq == self.head.seq + 1:
                self.rows.append(row)
                self.head = Head(seq=row.seq, hash=row.hash)
        if len(self.rows) > STATUS_ROWS:
            del self.rows[: len(self.rows) - STATUS_ROWS]

    def enter(self, state: SagaState, waiting_tool: str | None = None) -> None:
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
        if not self.visible or shown == self.shown or state is SagaState.COMPENSATING:
            return
        self.shown = shown
        tool = visibility.WAITING_TOOL
        workflow.upsert_search_attributes(
            [
                visibility.STATE.value_set(state.value),
                tool.value_set(waiting_tool) if waiting_tool else tool.value_unset(),
            ]
        )

    def continue_as_new_suggested(self) -> bool:
        """Whether history is long enough that the workflow should continue as new now."""
        info = workflow.info()
        return (
            info.is_continue_as_new_suggested()
            or info.get_current_history_length() >= self.options.continue_as_new_events
        )

    def heartbeat_timeout(self, spec: ToolSpec | None) -> timedelta:
        """A tool's (``spec``) or, for None, a journal activity's, unless the options set one."""
        if self.options.heartbeat_timeout_s:
            return timedelta(seconds=self.options.heartbeat_timeout_s)
        return timedelta(seconds=spec.heartbeat_timeout_s) if spec else JOURNAL_HEARTBEAT
