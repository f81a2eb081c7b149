"""One plugin for client and worker: converters, the saga workflow, and the saga activities."""

from __future__ import annotations

import dataclasses
import enum
import functools
import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from datetime import timedelta
from typing import Any, Literal

from temporalio import workflow
from temporalio.converter import PayloadCodec
from temporalio.plugin import SimplePlugin
from temporalio.worker import Worker, WorkerConfig, WorkflowRunner
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.decisions import Keyring, Policy
from sagacity.evidence.redaction import Redactor
from sagacity.settings import Settings, load_settings
from sagacity.store.approvals import ApprovalStore
from sagacity.store.journal import JournalStore
from sagacity.temporal import codec_scope, visibility
from sagacity.temporal.activities import DEFAULT_OUTAGE_WINDOW, SagaActivities
from sagacity.temporal.activities.escalation import EscalationTarget
from sagacity.temporal.codec import data_converter
from sagacity.temporal.codec_scope import CodecScope, ScopedCodec
from sagacity.temporal.limits import SizeLimits
from sagacity.temporal.rollback import RollbackActivities, RollbackWorkflow
from sagacity.temporal.workflow import SagaWorkflow, StepsWorkflow
from sagacity.tools import CompensableTool, ToolRegistry

_log = logging.getLogger(__name__)


def sandbox(existing: WorkflowRunner | None, *, tool_modules: Sequence[str] = ()) -> WorkflowRunner:
    """The workflow sandbox a worker with this plugin runs sandboxed workflows in.

    Sagacity's own modules are deterministic and stateless at import: loaded once per worker
    rather than once per workflow run. `cryptography` too: the saga checks decisions' signatures
    in workflow code, and its Rust extension cannot be imported again inside each run. The
    modules that declare the worker's tools (``tool_modules``) too: a workflow names tools and
    never runs them, and a tools module may import what the sandbox refuses (an HTTP client,
    the Agents SDK) when a workflow's package imports it. A sandbox another plugin configured
    keeps its own passthroughs; an unsandboxed runner is left as its owner chose.
    """
    if existing is None:
        existing = SandboxedWorkflowRunner()
    if not isinstance(existing, SandboxedWorkflowRunner):
        return existing
    return dataclasses.replace(
        existing,
        restrictions=existing.restrictions.with_passthrough_modules(
            "sagacity", "cryptography", "_cffi_backend", *tool_modules
        ),
    )


def _tool_modules(tools: ToolRegistry, workflows: Sequence[type]) -> list[str]:
    """The modules declaring ``tools``, less those of ``workflows`` (a workflow's own module
    stays in the sandbox its author chose) and ``__main__``."""
    own = {w.__module__ for w in workflows} | {"__main__"}
    return sorted({t.tool.fn.__module__ for t in tools} - own)


def escalation_target(settings: Settings) -> EscalationTarget:
    """Where ``settings`` send escalations (``SAGACITY_ESCALATION_WEBHOOK``, ``_CONSOLE_URL``)."""
    webhook = settings.escalation_webhook
    return EscalationTarget(
        webhook=webhook.get_secret_value() if webhook is not None else None,
        console_url=settings.console_url,
    )


def _type_names(workflow_classes: Iterable[type]) -> list[str]:
    """The workflow types ``workflow_classes`` are registered under (a dynamic one has none)."""
    names = (workflow._Definition.must_from_class(c).name for c in workflow_classes)
    return [name for name in names if name is not None]


class _FromSettings(enum.Enum):
    CODEC = "the codec the settings name"


#: ``SagacityPlugin(codec=...)``'s default: the codec of ``SAGACITY_CODEC_KEYS`` (or
#: ``SAGACITY_CODEC_KEYS_FILE``, or the dev stack's keys), none when no key is set
CODEC_FROM_SETTINGS: Literal[_FromSettings.CODEC] = _FromSettings.CODEC
#: what a ``codec=`` argument may be: a codec, None (no codec), or the settings' codec
CodecChoice = PayloadCodec | None | Literal[_FromSettings.CODEC]


class SagacityPlugin(SimplePlugin):
    """Add to ``Client.connect(plugins=[...])``; workers built from that client get the rest.

    A client-only plugin (no ``journal``) sets the data converter so sagas can be started,
    signalled and queried. With a journal and tools it also registers the saga workflow and
    activities on every worker. Tool declarations are checked here, at worker start.
    ``redactor`` (default: secrets by name) rewrites inputs and results before they are
    journaled, and scrubs tools' exception text; ``checkpoints`` signs the chain head each
    activity leaves, and each ended saga's seal, into a directory outside Postgres;
    ``outage_window`` is how long activities wait out a journal database outage. With
    ``keyring`` every decision (approval, rejection, resolution) must be signed by a key in it;
    ``policy`` says who may decide and resolve which tool's calls. Both hold on every route, raw
    signals included. ``codec`` encrypts every payload (:mod:`sagacity.temporal.codec`) but
    those of the app's own workflows served beside the sagas (:mod:`.codec_scope`); by default
    it is the one the settings name, so clients and workers configured alike read each other's
    payloads; ``None`` turns it off. ``escalation`` is where approval requests past their
    SLA are escalated (default: the settings' webhook and console URL).
    """

    def __init__(
        self,
        *,
        journal: JournalStore | None = None,
        approvals: ApprovalStore | None = None,
        tools: Iterable[CompensableTool[..., Any]] = (),
        workflows: Sequence[type] = (),
        redactor: Redactor | None = None,
        checkpoints: CheckpointWriter | None = None,
        outage_window: timedelta = DEFAULT_OUTAGE_WINDOW,
        keyring: Keyring | None = None,
        policy: Policy | None = None,
        codec: CodecChoice = CODEC_FROM_SETTINGS,
        escalation: EscalationTarget | None = None,
    ) -> None:
        if codec is CODEC_FROM_SETTINGS:
            # every process of a deployment (worker, CLI, approvals service, the user's own
            # client) must encrypt with the same keys, and they all read these settings
            codec = load_settings().payload_codec()
        registry = ToolRegistry(tools)
        if (journal is None) != (approvals is None):
            raise TypeError("a worker plugin needs both journal= and approvals=")
        self._activities = None
        rollback: list[Callable[..., Awaitable[Any]]] = []
        if journal is not None and approvals is not None:
            rollback = [RollbackActivities(journal, registry).plan]
            self._activities = SagaActivities(
                journal,
                approvals,
                registry,
                redactor=redactor,
                checkpoints=checkpoints,
                outage_window=outage_window,
                keyring=keyring,
                policy=policy,
                escalation=escalation or escalation_target(load_settings()),
            )
        converter = data_converter(None if codec is None else ScopedCodec(codec))
        self._workflows = [StepsWorkflow, SagaWorkflow, RollbackWorkflow, *workflows]
        super().__init__(
            "sagacity.SagacityPlugin",
            data_converter=converter,
            # an update too large for history would fail the workflow task that takes it
            interceptors=[SizeLimits(converter), CodecScope()],
            activities=[*self._activities.all(), *rollback] if self._activities else None,
            # the steps workflow, and under its former type for sagas started under that; the
            # rollback of ended sagas
            workflows=self._workflows if journal is not None else None,
            workflow_runner=functools.partial(
                sandbox, tool_modules=_tool_modules(registry, workflows)
            ),
        )
        self.tools = registry

    def configure_worker(self, config: WorkerConfig) -> WorkerConfig:
        """Sagacity's part of the worker; the workflows registered on it before are the app's,
        whose payloads the codec leaves clear (:mod:`.codec_scope`)."""
        codec_scope.host_types(
            _type_names(config.get("workflows", ())), claimed=_type_names(self._workflows)
        )
        return super().configure_worker(config)

    async def run_worker(self, worker: Worker, next: Callable[[Worker], Awaitable[None]]) -> None:
        """Before the worker polls: whether its namespace has the visibility search attributes.

        Sagas it opens show their state in them only if so; otherwise it says once how to
        register them, and sagas run without. The worker then runs marked as one, for the
        codec's scope.
        """
        if self._activities is not None:
            client = worker.client
            why = await visibility.why_hidden(client)
            if why is None:
                self._activities.visible_in.add(client.namespace)
            else:
                _log.warning(
                    "sagas on namespace %s do not show their state in Temporal visibility (%s); "
                    "register the attributes with %s, then restart the worker",
                    client.namespace,
                    why,
                    " and ".join(f"`{c}`" for c in visibility.register_commands(client.namespace)),
                )
        await super().run_worker(worker, functools.partial(codec_scope.serving, next=next))
