"""What the parts of a worker's saga activities share: its stores, tools, redaction, keys and
policy, and how long they wait out a database outage."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, TypeVar

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Keyring, Policy
from sagacity.evidence.redaction import Redactor
from sagacity.journal import Draft, Phase
from sagacity.store.approvals import ApprovalStore
from sagacity.store.halts import HaltStore
from sagacity.store.journal import JournalStore
from sagacity.temporal.activities.heartbeat import outlast
from sagacity.tools import ToolRegistry

__all__ = ["DEFAULT_OUTAGE_WINDOW", "ActivityState", "journal_among"]

T = TypeVar("T")

#: how long journal reads and writes inside an activity wait out a database outage by default
DEFAULT_OUTAGE_WINDOW = timedelta(minutes=10)


@dataclass
class ActivityState:
    """One worker's stores, tools and rules, as every part of its saga activities uses them."""

    journal: JournalStore
    approvals: ApprovalStore
    tools: ToolRegistry
    redactor: Redactor
    checkpoints: CheckpointWriter | None
    outage_window: timedelta
    keyring: Keyring | None
    policy: Policy
    halts: HaltStore
    #: the namespaces whose sagas show their state in search attributes (registered there)
    visible_in: set[str] = field(default_factory=set)

    async def outlast(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run a database operation, waiting out an outage of up to ``outage_window``."""
        return await outlast(self.outage_window, op)

    def draft(
        self, saga_id: str, tool_name: str, phase: Phase, input: str = "", payload: str = ""
    ) -> Draft:
        """A row as it will be stored: secrets redacted before anything reaches Postgres."""
        return self.redactor.draft(Draft(saga_id, tool_name, phase, input, payload)).value


def journal_among(activities: Iterable[Callable[..., Any]]) -> JournalStore | None:
    """The journal the saga activities among ``activities`` write to (None: none is there)."""
    for fn in activities:
        state = getattr(getattr(fn, "__self__", None), "state", None)
        if isinstance(state, ActivityState):
            return state.journal
    return None
