"""A tool's own SLA (``@compensable(approval_sla=...)``): it travels in the recorded catalog, so a
declarative saga with no SLA option escalates past it; the shorter of tool's and saga's wins.

Real Temporal and Postgres, an in-process worker with a keyring (decisions signed) and a webhook
receiver in the test (``tests/approvals/test_escalation.py``'s).
"""

from __future__ import annotations

import json
import uuid
from datetime import timedelta

import pytest
from agents import function_tool
from temporalio.client import Client

from sagacity import Reversibility, compensable
from sagacity.agents import compensable_function_tool
from sagacity.approvals import ApprovalService
from sagacity.errors import SettingsError
from sagacity.evidence.decisions import load_keyring
from sagacity.evidence.redaction import Redactor
from sagacity.settings import Settings, load_settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.activities.escalation import EscalationTarget
from sagacity.temporal.activities.tools import catalog
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step, ToolSpec
from sagacity.temporal.plugin import escalation_target
from sagacity.temporal.saga.escalation import approval_sla_s
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.tools import ToolRegistry
from tests.approvals.test_escalation import SECRET_PATH, Receiver, receiver, service
from tests.temporal.conftest import awaiting_approval, serving, wait_for

__all__ = ["receiver", "service"]  # fixtures, shared by name

PAGED: list[str] = []


@compensable(reversibility=Reversibility.IRREVERSIBLE, approval_sla=timedelta(seconds=1))
async def page_oncall(team: str) -> str:
    """Page a team's on-call engineer."""
    PAGED.append(team)
    return f"paged {team}"


@compensable(reversibility=Reversibility.IRREVERSIBLE)
async def wire_money(amount: int) -> int:
    """Wire money out."""
    return amount


@function_tool
def close_account(account: str) -> str:
    """Close a customer's account."""
    return account


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SAGACITY_ESCALATION_WEBHOOK", "hooks.slack.com/services/T0/B0/s3cr3t"),
        ("SAGACITY_ESCALATION_WEBHOOK", "ftp://hooks.example/s3cr3t"),
        ("SAGACITY_CONSOLE_URL", "approvals.example.com"),
    ],
)
def test_a_webhook_or_console_url_that_is_no_http_url_stops_the_worker_at_start(
    variable: str, value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=f"{variable}: .*must be an http") as raised:
        load_settings()
    assert "s3cr3t" not in str(raised.value)  # a webhook's URL is its secret


def test_an_empty_webhook_is_unset() -> None:
    assert load_settings(escalation_webhook="").escalation_webhook is None
    target = escalation_target(load_settings(escalation_webhook="https://h.example:8443/x/y"))
    assert (target.webhook, target.to) == ("https://h.example:8443/x/y", "https://h.example:8443")


def test_the_sla_a_tool_declares_is_in_its_catalog_entry_and_absent_otherwise() -> None:
    paged, wired = catalog(ToolRegistry([page_oncall, wire_money]), brief=True)
    assert paged.approval_sla_s == 1.0
    # a catalog without SLAs is the payload it always was (old histories replay unchanged)
    assert wired.approval_sla_s is None and "approval_sla_s" not in wired.model_dump()
    assert approval_sla_s(wired, None) is None
    assert approval_sla_s(wired, 30) == 30
    assert approval_sla_s(paged, 30) == 1.0 and approval_sla_s(paged.model_copy(), 0.5) == 0.5
    with pytest.raises(ValueError, match="approval_sla must be positive"):
        compensable(reversibility=Reversibility.IRREVERSIBLE, approval_sla=timedelta(0))
    with pytest.raises(ValueError):
        SagaOptions(approval_sla_s=0)
    assert ToolSpec.model_validate(wired.model_dump()) == wired
    # an Agents SDK FunctionTool declares one the same way
    closing = compensable_function_tool(
        close_account, reversibility=Reversibility.IRREVERSIBLE, approval_sla=timedelta(hours=4)
    )
    (closed,) = catalog(ToolRegistry([closing]), brief=True)
    assert closed.approval_sla_s == 4 * 3600


async def test_a_tool_declared_sla_escalates_a_saga_that_sets_none(
    receiver: Receiver,
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    redactor: Redactor,
    settings: Settings,
    service: ApprovalService,
) -> None:
    assert settings.keyring is not None
    PAGED.clear()
    async with serving(
        temporal_client,
        task_queue,
        journal=journal,
        approvals=approvals,
        tools=[page_oncall],
        redactor=redactor,
        keyring=load_keyring(settings.keyring),
        escalation=EscalationTarget(webhook=receiver.url + SECRET_PATH),
    ):
        handle = await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(steps=[Step(tool="page_oncall", args={"team": "db"})]),
            id=f"sla-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SagaResult,
        )
        status = await wait_for(handle, awaiting_approval)
        assert status.pending_approval is not None
        seq = status.pending_approval.journal_seq
        await receiver.count(1)
        # no console URL configured: the message says how to decide from the CLI instead
        assert f"sagacity approvals show {handle.id} {seq}" in receiver.posts[0]["text"]
        assert PAGED == []
        await service.approve(handle.id, seq, approver="alice")
        assert (await handle.result()).status is SagaState.COMPLETED
    assert PAGED == ["db"] and len(receiver.posts) == 1
    decided = next(r for r in await journal.read(handle.id) if r.seq == seq + 1)
    assert json.loads(decided.payload)["escalated"]["to"] == receiver.url
