"""An operator's halt as a saga meets it, the lookup that proves it, the resume that lifts it."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from sagacity.evidence.decisions import Signature, Statement, halt_statement
from sagacity.journal.canonical import to_json
from sagacity.temporal.models.decisions import Identity, Reason

#: the longest halt scope a signal may carry (as JSON): the saga hands it on to an activity
MAX_HALT_SCOPE_CHARS = 100_000


def _halt_scope(scope: dict[str, Any]) -> dict[str, Any]:
    """A halt scope as ``HaltScope.as_json`` writes it, and small enough to pass on."""
    if not set(scope) <= {"tool", "task_queue", "sagas"}:
        raise ValueError("a halt's scope has only tool, task_queue and sagas")
    if len(to_json(scope)) > MAX_HALT_SCOPE_CHARS:
        raise ValueError(f"a halt's scope is at most {MAX_HALT_SCOPE_CHARS} characters of JSON")
    return scope


class HaltNotice(BaseModel):
    """An operator's halt, as a saga meets it: from an activity it refused, or by signal.

    ``keep``: the saga waits before its next call or compensation until the halt is lifted.
    ``compensate``: it aborts, undoing what it can (a call waiting for approval stays waiting).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    #: 0: a halt the worker could not name
    halt_id: int = Field(ge=0)
    kind: Literal["halt", "quarantine"] = "halt"
    policy: Literal["keep", "compensate"] = "keep"
    reason: Reason = ""
    operator: Identity | None = None
    #: the call's INTENT was written before the halt (a retry found it): if the saga aborts
    #: instead of running it, its effect is unknown and compensated
    intent_written: bool = False
    #: the halt's scope as recorded (``HaltScope.as_json``) and the operator's signature over
    #: the halt (:meth:`statement`): what proves it without a look at the halt store
    scope: Annotated[dict[str, Any], AfterValidator(_halt_scope)] | None = None
    signature: Signature | None = None

    def describe(self) -> str:
        who = f" by {self.operator}" if self.operator else ""
        why = f": {self.reason}" if self.reason else ""
        return f"{self.kind} {self.halt_id}{who} ({self.policy}){why}"

    def statement(self) -> Statement | None:
        """What the operator signed to halt (None: the notice does not say the scope)."""
        if self.scope is None:
            return None
        return halt_statement(
            kind=self.kind,
            policy=self.policy,
            scope=self.scope,
            operator=self.operator or "",
            reason=self.reason,
        )

    def record(self) -> dict[str, Any]:
        """The halt as an abort's journal row records it (``docs/decisions.md``)."""
        return {"id": self.halt_id, "kind": self.kind, "policy": self.policy, "scope": self.scope}

    def covers(self, saga_id: str, task_queue: str) -> bool:
        """Whether the halt's scope aborts saga ``saga_id`` on ``task_queue`` by itself (a
        tool's halt holds calls of that tool only; an unknown scope covers nothing)."""
        scope = self.scope
        if scope is None or scope.get("tool") is not None:
            return False
        sagas = scope.get("sagas")
        queue = scope.get("task_queue")
        return (sagas is None or saga_id in sagas) and queue in (None, task_queue)


class HaltLookup(BaseModel):
    """Is the ``halt`` signal ``told`` real, and does it abort saga ``saga_id``?"""

    saga_id: str
    told: HaltNotice


class HaltLookedUp(BaseModel):
    """The halt that aborts the saga (from the halt store, else the signal its signature
    proves), or why the signal is refused."""

    notice: HaltNotice | None = None
    refusal: str = ""


class Resume(BaseModel):
    """The ``resume`` signal: a halt was lifted, so a held saga tries its next step again."""

    model_config = ConfigDict(extra="forbid", strict=True)

    halt_id: int | None = Field(default=None, ge=1)
    operator: Identity | None = None
