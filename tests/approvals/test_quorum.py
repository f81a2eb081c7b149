"""Two of three: a tool's ``ApprovalPolicy(required=2, group="finance",
starter_may_approve=False)`` on real Temporal and Postgres, with the settings ``sagacity dev``
makes (a keyring, each approver's own key, redaction).

An approval by alice leaves the request open ("1 of 2"); alice again, the starter dave (in the
group) and mallory (not in it) are refused and recorded; a worker SIGKILLed between the two
approvals changes nothing (the next one still needs just bob's); bob's approval runs the call
once, its APPROVED row lists both signatures, and ``sagacity verify`` (live and from a bundle)
checks them and names a removed or duplicated one. A rejection by carol after alice's approval
ends the request and compensates what ran before.

The worker is ``sagacity worker --app tests.approvals.quorum_app`` in a process of its own.
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
from agents import function_tool
from temporalio.client import Client, WorkflowHandle

from sagacity import ApprovalPolicy, Reversibility, ToolRegistry, compensable
from sagacity.agents import compensable_function_tool
from sagacity.approvals import ApprovalService
from sagacity.approvals.http import create_app
from sagacity.devstack import Endpoints
from sagacity.errors import ToolDeclarationError
from sagacity.evidence.decisions import Signer, keyring_entry, load_keyring, write_keyring
from sagacity.evidence.keys import generate_key
from sagacity.journal.phases import APPROVAL_GATE
from sagacity.settings import Settings
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.activities.tools import catalog
from sagacity.temporal.models import (
    SagaOptions,
    SagaResult,
    SagaSpec,
    SagaState,
    Step,
    ToolSpec,
)
from sagacity.temporal.workflow import STEPS_WORKFLOW
from tests.approvals import quorum_app, test_decisions_bound, test_signed
from tests.approvals.conftest import Cli, CliResult
from tests.approvals.test_decisions_bound import Verifier
from tests.approvals.test_signed import Keys, app_worker, running
from tests.evidence.test_default_config_tamper import Owner
from tests.temporal.conftest import awaiting_approval, forget_killed_worker, phases, wait_for
from tests.temporal.test_crash import WorkerProcess

keys = test_signed.keys
anchors = test_decisions_bound.anchors
verifier = test_decisions_bound.verifier

FINANCE = ["alice", "bob", "carol", "dave"]


@pytest.fixture
def people(keys: Keys, tmp_path: Path) -> dict[str, Path]:
    """Each person's own signing key; the keyring trusts them and names the finance group."""
    keyring = load_keyring(keys.keyring)
    found = {"alice": keys.alice, "mallory": keys.mallory}
    for name in ("bob", "carol", "dave"):
        found[name] = tmp_path / f"{name}.pem"
        keyring.keys.append(keyring_entry(name, generate_key(found[name]).public_key(), [name]))
    keyring.groups = {"finance": FINANCE}
    write_keyring(keys.keyring, keyring)
    return found


@pytest.fixture
async def quorum_worker(
    endpoints: Endpoints,
    database_url: str,
    task_queue: str,
    settings: Settings,
    keys: Keys,
    people: dict[str, Path],
    tmp_path: Path,
) -> AsyncIterator[WorkerProcess]:
    process = app_worker(
        endpoints,
        database_url,
        task_queue,
        settings,
        keys,
        tmp_path / "worker.log",
        app="tests.approvals.quorum_app",
        approvers="wire_funds=alice|bob|carol|dave|mallory",
    )
    async with running(process):
        yield process


def signed_service(
    client: Client, approvals: ApprovalStore, journal: JournalStore, settings: Settings, keys: Keys
) -> ApprovalService:
    """The approvals service as ``sagacity approvals serve`` runs it: decisions signed with the
    service key (which vouches for whom it authenticated), checked against the keyring."""
    assert settings.service_key is not None
    return ApprovalService(
        client,
        approvals,
        journal=journal,
        signer=Signer.open(settings.service_key),
        keyring=load_keyring(keys.keyring),
    )


Start = Callable[..., Coroutine[Any, Any, WorkflowHandle[Any, SagaResult]]]


@pytest.fixture
def start(temporal_client: Client, task_queue: str, quorum_worker: WorkerProcess) -> Start:
    """Start a hold then a wire of ``amount``, started by dave (who is in the group)."""

    async def steps(amount: int) -> WorkflowHandle[Any, SagaResult]:
        args = {"order_id": "o-7", "amount": amount}
        return await temporal_client.start_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[Step(tool="hold_funds", args=args), Step(tool="wire_funds", args=args)],
                options=SagaOptions(compensation_backoff_s=0.1, started_by="dave"),
            ),
            id=f"quorum-{uuid.uuid4().hex[:8]}",
            task_queue=task_queue,
            result_type=SagaResult,
        )

    return steps


Decide = Callable[..., Coroutine[Any, Any, CliResult]]


@pytest.fixture
def decide(cli: Cli, keys: Keys, people: dict[str, Path]) -> Decide:
    """``who``'s decision with the CLI, signed with their own key."""

    async def run(who: str, saga_id: str, seq: int, *how: str) -> CliResult:
        return await cli(
            "approvals", *how, saga_id, str(seq), "--as", who, extra_env=keys.env(people[who])
        )

    return run


async def test_two_of_three_needs_two_distinct_approvers_not_the_starter(
    start: Start,
    quorum_worker: WorkerProcess,
    temporal_client: Client,
    decide: Decide,
    cli: Cli,
    journal: JournalStore,
    owner_database_url: str,
    verifier: Verifier,
) -> None:
    handle = await start(900)
    status = await wait_for(handle, awaiting_approval)
    pending = status.pending_approval
    assert pending is not None and pending.tool_name == "wire_funds"
    assert pending.quorum is not None
    assert (pending.quorum.required, pending.quorum.group, pending.quorum.approved_by) == (
        2,
        "finance",
        [],
    )
    seq = pending.journal_seq
    # the request row records the policy and the starter (hash-chained)
    request = (await journal.read(handle.id))[seq - 1]
    assert json.loads(request.payload) == {
        "policy": {"required": 2, "group": "finance", "starter_may_approve": False},
        "started_by": "dave",
    }

    first = await decide("alice", handle.id, seq, "approve")
    assert first.code == 0, first.stderr
    assert "1 of 2 approvals in" in first.stdout, first.stdout
    status = await handle.query("status", result_type=type(status))
    assert status.state is SagaState.AWAITING_APPROVAL
    assert status.pending_approval is not None and status.pending_approval.quorum is not None
    assert status.pending_approval.quorum.approved_by == ["alice"]
    listed = await cli("approvals", "show", handle.id, str(seq))
    assert "1 of 2 approvals (finance): alice" in listed.stdout, listed
    inbox = await cli("approvals", "list", "--saga", handle.id, "--json")
    assert [r["approvals"]["approved_by"] for r in inbox.json()["requests"]] == [["alice"]]

    again = await decide("alice", handle.id, seq, "approve")
    assert again.code != 0 and "already approved" in again.stderr, again
    starter = await decide("dave", handle.id, seq, "approve")
    assert starter.code != 0 and "started this saga" in starter.stderr, starter
    outsider = await decide("mallory", handle.id, seq, "approve")
    assert outsider.code != 0 and "not in the group 'finance'" in outsider.stderr, outsider
    status = await handle.query("status", result_type=type(status))
    refused = status.refused_decisions
    assert [r.split(": ", 1)[0] for r in refused] == ["alice", "dave", "mallory"], refused

    # the worker SIGKILLed between the two approvals: the next one rebuilds alice's from history
    quorum_worker.kill()
    await forget_killed_worker(temporal_client, handle.id)
    await quorum_worker.start()
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None and status.pending_approval.quorum is not None
    assert status.pending_approval.quorum.approved_by == ["alice"]

    second = await decide("bob", handle.id, seq, "approve")
    assert second.code == 0 and "approvals in" not in second.stdout, second
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPLETED, result
    rows = await journal.read(handle.id)
    assert [(r.tool_name, r.phase.value) for r in rows if r.tool_name == "wire_funds"] == [
        ("wire_funds", "AWAITING_APPROVAL"),
        ("wire_funds", "INTENT"),
        ("wire_funds", "EXECUTED"),
    ]
    approved = rows[seq]
    assert (approved.seq, approved.phase.value) == (seq + 1, "APPROVED")
    body = json.loads(approved.payload)
    assert body["required"] == 2 and body["by"] == "bob"
    assert [(a["by"], a["signer"]) for a in body["approvals"]] == [
        ("alice", "alice"),
        ("bob", "bob"),
    ]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline

    owner = Owner(owner_database_url)
    honest = await owner.rows(handle.id)

    def co_approvals(change: Callable[[list[Any]], list[Any]]) -> Callable[..., Any]:
        def rewrite(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            out = []
            for r in rows:
                if r["seq"] == seq + 1:
                    payload = json.loads(r["payload"])
                    payload["approvals"] = change(payload["approvals"])
                    r = {**r, "payload": json.dumps(payload, separators=(",", ":"))}
                out.append(r)
            return out

        return rewrite

    tampers = {
        # alice's co-signature deleted by the tables' owner, the chain recomputed
        "removed": (
            co_approvals(lambda listed: listed[1:]),
            f"approval seq {seq + 1} has 1 of the 2 co-signatures its request requires",
        ),
        # bob's listed twice in place of alice's
        "duplicated": (
            co_approvals(lambda listed: [listed[1], listed[1]]),
            f"approval seq {seq + 1} lists 'bob' twice",
        ),
        # alice's co-signature said to be carol's
        "swapped": (
            co_approvals(lambda listed: [{**listed[0], "by": "carol"}, listed[1]]),
            "co-approval by 'carol'",
        ),
    }
    for name, (change, named) in tampers.items():
        await owner.rewrite(handle.id, change)
        live, said, offline, said_offline = await verifier.both(handle.id)
        assert (live, offline) == (1, 1), (name, said + said_offline)
        for output in (said, said_offline):
            assert named in output, (name, output)
        await owner.replace(handle.id, honest)
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline


async def test_one_rejection_after_an_approval_ends_the_request_and_compensates(
    start: Start, decide: Decide, journal: JournalStore, verifier: Verifier
) -> None:
    handle = await start(400)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    assert (await decide("alice", handle.id, seq, "approve")).code == 0
    rejected = await decide("carol", handle.id, seq, "reject", "--reason", "not this month")
    assert rejected.code == 0 and "rejected" in rejected.stdout, rejected
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.COMPENSATED, result
    rows = await phases(journal, handle.id)
    assert ("hold_funds", "COMPENSATED") in rows and ("wire_funds", "INTENT") not in rows, rows
    decision = (await journal.read(handle.id))[seq]
    assert (decision.tool_name, decision.phase.value) == (APPROVAL_GATE, "REJECTED")
    body = json.loads(decision.payload)
    assert (body["by"], body["reason"], body["required"]) == ("carol", "not this month", 2)
    assert [a["by"] for a in body["approvals"]] == ["alice"]
    live, said, offline, said_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), said + said_offline


def test_a_policy_is_declared_on_calls_that_wait_and_as_an_approval_policy() -> None:
    def pay(amount: int) -> str:
        return "paid"

    with pytest.raises(ToolDeclarationError, match="none of this tool's do"):
        compensable(approval_policy=ApprovalPolicy(required=2))(pay)
    with pytest.raises(ToolDeclarationError, match="takes an ApprovalPolicy"):
        compensable(  # type: ignore[call-overload]
            reversibility=Reversibility.IRREVERSIBLE, approval_policy={"required": 2}
        )(pay)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        ApprovalPolicy(required=0)
    policy = ApprovalPolicy(required=2, group="finance")
    tool = compensable(reversibility=Reversibility.IRREVERSIBLE, approval_policy=policy)(pay)
    assert tool.options.approval_policy == policy


async def test_the_http_api_counts_a_co_approval_and_an_abort_lists_it(
    start: Start,
    temporal_client: Client,
    approvals: ApprovalStore,
    journal: JournalStore,
    settings: Settings,
    keys: Keys,
    decide: Decide,
    verifier: Verifier,
) -> None:
    handle = await start(300)
    status = await wait_for(handle, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    service = signed_service(temporal_client, approvals, journal, settings, keys)
    app = create_app(service, {"tok-alice": "alice", "tok-dave": "dave"})
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="https://approvals"
    ) as web:
        url = f"/approvals/{handle.id}/{seq}"

        async def approve(token: str, body: dict[str, Any]) -> httpx.Response:
            auth = {"Authorization": f"Bearer {token}"}
            return await web.post(f"{url}/approve", json=body, headers=auth)

        counted = await approve("tok-alice", {})
        assert counted.status_code == 200, counted.text
        assert (counted.json()["decision"], counted.json()["awaiting"]) == ("approved", "1 of 2")
        shown = await web.get(url, headers={"Authorization": "Bearer tok-alice"})
        assert shown.json()["approvals"] == {
            "required": 2,
            "group": "finance",
            "approved_by": ["alice"],
            "started_by": "dave",
            "starter_may_approve": False,
        }, shown.text
        # the starter, through the service key that may sign for anyone: still refused
        starter = await approve("tok-dave", {})
        assert starter.status_code == 403, starter.text
        assert "started this saga" in starter.text, starter.text
        # an edit on a request two people must approve as proposed
        edited = await approve("tok-alice", {"args": {"order_id": "o-8", "amount": 1}})
        assert edited.status_code in (409, 422), edited.text
    edit = await decide("bob", handle.id, seq, "approve", "--args", '{"order_id":"o-8","amount":1}')
    assert edit.code != 0 and "cannot be approved with changes" in edit.stderr, edit

    await handle.signal("abort", {"reason": "test over", "by": "alice"})
    result = await asyncio.wait_for(handle.result(), 60)
    assert result.status is SagaState.ABORTED, result
    decision = (await journal.read(handle.id))[seq]
    assert (decision.tool_name, decision.phase.value) == (APPROVAL_GATE, "REJECTED")
    body = json.loads(decision.payload)
    assert body["abort"] is True and [a["by"] for a in body["approvals"]] == ["alice"]
    _, said, _, said_offline = await verifier.both(handle.id)
    assert "co-approval" not in said + said_offline and "FAILED" not in said, said


async def test_the_starter_is_who_ran_saga_start_and_unknown_refuses_no_one(
    quorum_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    cli: Cli,
    decide: Decide,
    journal: JournalStore,
    tmp_path: Path,
) -> None:
    steps = tmp_path / "steps.json"
    args = {"order_id": "o-9", "amount": 100}
    steps.write_text(json.dumps({"steps": [{"tool": "wire_funds", "args": args}]}))
    started = await cli(
        "saga", "start", "--steps", str(steps), "--task-queue", task_queue, "--as", "dave"
    )
    assert started.code == 0, started.stderr
    by_cli = temporal_client.get_workflow_handle(started.stdout.strip(), result_type=SagaResult)
    status = await wait_for(by_cli, awaiting_approval)
    assert status.pending_approval is not None and status.pending_approval.quorum is not None
    assert status.pending_approval.quorum.started_by == "dave"
    refused = await decide("dave", by_cli.id, status.pending_approval.journal_seq, "approve")
    assert refused.code != 0 and "started this saga" in refused.stderr, refused
    await by_cli.signal("abort", {"reason": "test over", "by": "alice"})

    # started through the Python API without saying who: the request records the starter as
    # unknown (null), and no one is refused as the starter
    unknown = await temporal_client.start_workflow(
        STEPS_WORKFLOW,
        SagaSpec(steps=[Step(tool="wire_funds", args=args)]),
        id=f"quorum-{uuid.uuid4().hex[:8]}",
        task_queue=task_queue,
        result_type=SagaResult,
    )
    status = await wait_for(unknown, awaiting_approval)
    assert status.pending_approval is not None
    seq = status.pending_approval.journal_seq
    row = (await journal.read(unknown.id))[seq - 1]
    assert json.loads(row.payload)["started_by"] is None
    counted = await decide("dave", unknown.id, seq, "approve")
    assert counted.code == 0 and "1 of 2 approvals in" in counted.stdout, counted
    assert (await decide("carol", unknown.id, seq, "approve")).code == 0
    result = await asyncio.wait_for(unknown.result(), 60)
    assert result.status is SagaState.COMPLETED, result
    assert (await asyncio.wait_for(by_cli.result(), 60)).status is SagaState.ABORTED


def test_a_policy_travels_in_the_catalog_and_old_catalogs_decode_without_one() -> None:
    @function_tool
    def pay_out(account: str) -> str:
        """Pay an account out."""
        return account

    policy = ApprovalPolicy(required=2, group="finance", starter_may_approve=False)
    agent_tool = compensable_function_tool(
        pay_out, reversibility=Reversibility.IRREVERSIBLE, approval_policy=policy
    )
    wired, plain = catalog(ToolRegistry([agent_tool, quorum_app.hold_funds]), brief=True)
    assert wired.approval_policy == policy
    assert ToolSpec.model_validate_json(wired.model_dump_json()) == wired
    # a tool without one: nothing on the wire, so every catalog recorded before reads as it did
    assert plain.approval_policy is None and "approval_policy" not in plain.model_dump_json()
    assert "started_by" not in SagaOptions().model_dump_json()
