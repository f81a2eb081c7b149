"""Approval rules on real Temporal and Postgres, with the settings ``sagacity dev`` makes (a
keyring, alice's key, redaction): a REVERSIBLE refund over 1,000 waits for a human, one under it
does not, a rejected one compensates what ran before it, and ``sagacity verify`` (live and from a
bundle) binds each rule's request to its own call and names a tampered one.

The worker is ``sagacity worker --app tests.approvals.refund_app`` in a process of its own.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import httpx
import pytest
from markupsafe import escape
from temporalio.client import Client, WorkflowHandle

from sagacity.approvals import ApprovalService
from sagacity.approvals.console import WebConsole
from sagacity.approvals.http import create_app
from sagacity.devstack import Endpoints
from sagacity.journal.phases import APPROVAL_GATE
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaOptions, SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals import test_decisions_bound, test_signed
from tests.approvals.conftest import Cli
from tests.approvals.test_decisions_bound import Verifier
from tests.approvals.test_signed import Keys, app_worker, running
from tests.evidence.test_default_config_tamper import Owner
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, phases, wait_for
from tests.temporal.test_crash import WorkerProcess

keys = test_signed.keys
anchors = test_decisions_bound.anchors
verifier = test_decisions_bound.verifier

WHY_1500 = "rule 'large refund': amount 1500 > 1000"
CONDITION = {"name": "large refund", "field": "amount", "op": ">", "value": 1000}


@pytest.fixture
def refund_app() -> str:
    """The app module the refund worker serves (a test module may serve another)."""
    return "tests.approvals.refund_app"


@pytest.fixture
async def refund_worker(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    settings: Settings,
    keys: Keys,
    tmp_path: Path,
    refund_app: str,
) -> AsyncIterator[WorkerProcess]:
    process = app_worker(
        endpoints,
        database_url,
        task_queue,
        settings,
        keys,
        tmp_path / "worker.log",
        app=refund_app,
        approvers="refund=alice",
    )
    async with running(process):
        yield process


Start = Callable[..., Coroutine[Any, Any, WorkflowHandle[Any, SagaResult]]]


@pytest.fixture
def start(temporal_client: Client, task_queue: str, refund_worker: WorkerProcess) -> Start:
    """Start a ``sagacity.Steps`` saga of ``(tool, args)`` steps on the refund app's worker."""

    async def steps(*steps: tuple[str, dict[str, Any]]) -> WorkflowHandle[Any, SagaResult]:
        return await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[Step(tool=tool, args=args) for tool, args in steps],
                options=SagaOptions(compensation_backoff_s=0.1),
            ),
            id=f"rule-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SagaResult,
        )

    return steps


async def decide(cli: Cli, keys: Keys, saga_id: str, seq: int, *how: str) -> None:
    """Alice's signed decision, with the CLI: ``approve``, or ``reject --reason ...``."""
    done = await cli("approvals", *how, saga_id, str(seq), "--as", "alice", extra_env=keys.env())
    assert done.code == 0, done.stderr


async def http_and_console_show(
    service: ApprovalService, journal: JournalStore, saga_id: str, seq: int
) -> None:
    """The HTTP API's request and the console's inbox and request page say why it waits."""
    app = create_app(service, {"tok-alice": "alice"}, web=WebConsole(service, journal))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://approvals"
    ) as web:
        api = await web.get(
            f"/approvals/{saga_id}/{seq}", headers={"Authorization": "Bearer tok-alice"}
        )
        assert api.status_code == 200 and api.json()["why"] == WHY_1500, api.text
        signed_in = await web.post(
            "/console/sign-in",
            data={"token": "tok-alice", "next": "/console/"},
            headers={"Origin": "https://approvals"},
        )
        assert signed_in.status_code == 303
        said = str(escape(WHY_1500))  # as the pages' templates escape it
        inbox = await web.get("/console/", params={"saga": saga_id})
        assert inbox.status_code == 200 and said in inbox.text, inbox.text
        page = await web.get(f"/console/approvals/{saga_id}/{seq}")
        assert page.status_code == 200 and f'data-testid="why">{said}<' in page.text


async def test_a_refund_over_the_threshold_waits_and_one_under_it_runs_unasked(
    start: Start,
    temporal_client: Client,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
    approvals: ApprovalStore,
    owner_database_url: str,
    verifier: Verifier,
) -> None:
    # the first step is rule-gated: the call that opens the journal waits too
    handle = await start(
        ("refund", {"order_id": "o-1", "amount": 1500}),
        ("refund", {"order_id": "o-2", "amount": 500}),
        ("refund", {"order_id": "o-3", "amount": 2000}),
    )
    status = await wait_for(handle, awaiting_approval)
    pending = status.pending_approval
    assert pending is not None and pending.tool_name == "refund"
    assert pending.why == WHY_1500
    first = pending.journal_seq

    # the request's row names the rule and why; the service, CLI and HTTP model show the why
    row = (await journal.read(handle.id))[first - 1]
    assert (row.tool_name, row.phase.value) == ("refund", "AWAITING_APPROVAL")
    assert json.loads(row.payload) == {
        "rule": "large refund",
        "why": WHY_1500,
        "condition": CONDITION,
    }
    service = ApprovalService(temporal_client, approvals, journal=journal)
    assert (await service.get(handle.id, first)).why == WHY_1500
    await http_and_console_show(service, journal, handle.id, first)
    show = await cli("approvals", "show", handle.id, str(first))
    assert show.code == 0 and WHY_1500 in show.stdout, show
    listed = await cli("approvals", "list", "--saga", handle.id, "--json")
    assert [r["why"] for r in listed.json()["requests"]] == [WHY_1500], listed

    await decide(cli, keys, handle.id, first, "approve")
    status = await wait_for(
        handle,
        lambda s: awaiting_approval(s) and s.pending_approval.journal_seq != first,  # type: ignore[union-attr]
    )
    assert status.pending_approval is not None
    third = status.pending_approval.journal_seq
    assert status.pending_approval.why == "rule 'large refund': amount 2000 > 1000"
    await decide(cli, keys, handle.id, third, "approve")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPLETED, result

    rows = await journal.read(handle.id)
    refunds = [
        (json.loads(r.input)["amount"], r.phase.value) for r in rows if r.tool_name == "refund"
    ]
    # each refund ran once; only the two over 1,000 were asked about
    assert refunds == [
        (1500, "AWAITING_APPROVAL"),
        (1500, "INTENT"),
        (1500, "EXECUTED"),
        (500, "INTENT"),
        (500, "EXECUTED"),
        (2000, "AWAITING_APPROVAL"),
        (2000, "INTENT"),
        (2000, "EXECUTED"),
    ]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline

    owner = Owner(owner_database_url)
    honest = await owner.rows(handle.id)

    # the rule's request edited to say another threshold, the chain recomputed by the owner
    def loosen(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [
            {**r, "payload": r["payload"].replace('"value":1000', '"value":5000')}
            if r["seq"] == first
            else r
            for r in rows
        ]

    await owner.rewrite(handle.id, loosen)
    assert '"value":5000' in (await owner.rows(handle.id))[first - 1]["payload"]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    assert f"FAILED  {handle.id}" in said, said

    # the same edit without recomputing the chain: the row's hash no longer holds
    await owner.replace(handle.id, honest)
    await owner.sql(
        "UPDATE side_effect_journal SET payload = replace(payload, '1000', '5000') "
        "WHERE saga_id = %s AND seq = %s",
        handle.id,
        first,
    )
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline

    # the 2,000 refund's request and approval taken away: its rule asked, and nothing answered
    await owner.replace(handle.id, honest)
    await owner.rewrite(
        handle.id, lambda rows: [r for r in rows if r["seq"] not in (third, third + 1)]
    )
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (1, 1), said + said_offline
    for output in (said, said_offline):
        assert (
            f"INTENT seq {third} of 'refund' has no APPROVED before it, though its rule "
            "'large refund' asks for one: amount 2000 > 1000"
        ) in output, output
    await owner.replace(handle.id, honest)


async def test_a_rule_gated_refund_rejected_after_a_worker_kill_compensates_what_ran_before(
    start: Start,
    refund_worker: WorkerProcess,
    temporal_client: Client,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
    verifier: Verifier,
) -> None:
    handle = await start(
        ("hold_funds", {"order_id": "o-9", "amount": 1500}),
        ("refund", {"order_id": "o-9", "amount": 1500}),
    )
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None and status.pending_approval.why == WHY_1500
    seq = status.pending_approval.journal_seq
    # the worker SIGKILLed at the gate: a new one replays the saga, its rule judged the same
    refund_worker.kill()
    await forget_killed_worker(temporal_client, handle.id)
    await refund_worker.start()
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None and status.pending_approval.why == WHY_1500
    assert status.pending_approval.journal_seq == seq
    await decide(cli, keys, handle.id, seq, "reject", "--reason", "too much")
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED, result
    rows = await phases(journal, handle.id)
    assert ("hold_funds", "COMPENSATED") in rows, rows
    assert ("refund", "INTENT") not in rows, rows
    assert (APPROVAL_GATE, "REJECTED") in rows, rows
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline


async def test_a_refund_under_the_threshold_opens_no_request(
    start: Start, journal: JournalStore, verifier: Verifier
) -> None:
    handle = await start(("refund", {"order_id": "o-5", "amount": 1000}))
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPLETED, result
    assert await phases(journal, handle.id) == [("refund", "INTENT"), ("refund", "EXECUTED")]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline
