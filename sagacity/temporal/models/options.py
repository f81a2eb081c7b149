"""How a saga is started: its options, and a declarative saga's steps."""

from __future__ import annotations

from pydantic import BaseModel, Field

from sagacity.temporal.models.carry import SagaProgress
from sagacity.temporal.models.steps import Step


class SagaOptions(BaseModel):
    """Per-saga behaviour, chosen by whoever starts the saga."""

    #: how long a call waiting for approval waits for a decision before it is rejected as ``timeout``
    approval_deadline_s: float = 7 * 24 * 3600
    #: past this many seconds undecided, an approval request is escalated once (the next tier
    #: notified; ``docs/signals.md``), and the saga waits on until the deadline; None: only the
    #: tool's own SLA, if it declares one (the shorter of the two wins)
    approval_sla_s: float | None = Field(default=None, gt=0)
    #: who may approve: tool name (or ``"*"``) to identities; ``None`` lets any named approver decide
    approvers: dict[str, list[str]] | None = None
    #: attempts at each compensation before COMPENSATION_FAILED is journaled; with the backoff
    #: below (doubling, capped) the default keeps trying for about 8 minutes, longer than a
    #: database restart, so an outage alone never ends in COMPENSATION_FAILED
    compensation_attempts: int = Field(default=20, ge=1)
    compensation_backoff_s: float = Field(default=1.0, gt=0)
    compensation_max_interval_s: float = Field(default=30.0, gt=0)
    #: attempts at an idempotent tool that keeps raising, before FAILED is journaled
    idempotent_attempts: int = Field(default=3, ge=1)
    #: overrides every tool's heartbeat timeout: how soon a dead worker's call is noticed
    heartbeat_timeout_s: float | None = Field(default=None, gt=0)
    #: continue as new once history has this many events (besides whenever Temporal suggests
    #: it), so a saga of any length never reaches Temporal's history limit
    continue_as_new_events: int = Field(default=10_000, ge=50)
    #: who started the saga (``sagacity saga start`` fills it from ``--as`` or the login): a
    #: tool's ``ApprovalPolicy(starter_may_approve=False)`` refuses that principal's approval.
    #: None (left off the wire): unknown, so no approval is refused for it (the request row
    #: records the starter as unknown)
    started_by: str | None = Field(
        default=None, min_length=1, max_length=200, exclude_if=lambda v: v is None
    )


#: the :attr:`SagaSpec.engine_version` this release knows
ENGINE_VERSION = 1


class SagaSpec(BaseModel):
    """What a client starts a declarative saga (``sagacity.Steps``) with."""

    steps: list[Step]
    options: SagaOptions = Field(default_factory=SagaOptions)
    #: set by the saga itself when it continues as new; None when a client starts it
    progress: SagaProgress | None = None
    #: the saga engine every worker of the task queue knows, set by whoever starts the saga
    #: once all of them run a release with :data:`ENGINE_VERSION` (this one or later): at 1 the
    #: saga takes the branches of the patches deciding how a new saga opens its journal
    #: (``sagacity-open-in-first-call`` and those before it) without patch markers, two history
    #: events fewer (docs/versioning.md). None (the default), or a value below 1, decides with
    #: ``workflow.patched`` as before, so a release before it can take over the saga. A run
    #: continued as new keeps its first run's.
    engine_version: int | None = None
