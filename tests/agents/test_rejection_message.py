"""A rejection the model can use (issue 32): the approver's reason and message reach the agent as
the tool's result, and it takes another tool.

Real Temporal and Postgres, the Agents SDK's real loop with the scripted model, and the default
configuration's decisions: the worker has the session's keyring, and the rejection is signed
with alice's key, as ``sagacity approvals reject`` signs it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest
from temporalio.client import Client

from sagacity.agents import (
    AgentSagaRequest,
    Call,
    Conversation,
    Say,
    Script,
)
from sagacity.evidence.decisions import DecisionCheck, Keyring, Signer, load_keyring
from sagacity.journal import Phase
from sagacity.settings import Settings
from sagacity.store import JournalStore
from sagacity.temporal.models import Reject, SagaState
from tests.agents.conftest import WorkerFactory, start_agent
from tests.temporal import sample_tools
from tests.temporal.conftest import awaiting_approval, wait_for

MESSAGE = "Do not grant tokens; leave a note for billing that says: refund acct-9 by hand."
PREFIX = "Message from the approver: "


def note_from_the_approver(conversation: Conversation) -> Mapping[str, Any]:
    """What a model that read the rejection does: writes the note the approver asked for.

    It finds the message in the tool's result text (the activity fails, and the run with it,
    when the message is not there).
    """
    told = conversation.result_of("grant_tokens")
    assert isinstance(told, str) and told.startswith("Not approved, the tool did not run."), told
    line = next(line for line in told.splitlines() if line.startswith(PREFIX))
    return {"text": line.removeprefix(PREFIX)}


REROUTE = Script(
    turns=[
        [
            Call("grant_tokens", {"token_amount": 50, "account": "acct-9"}),
            Call("send_note", note_from_the_approver),
            Say(lambda c: f"Not granted; note left: {c.result_of('send_note')}"),
        ]
    ]
)


@pytest.fixture
def keyring(settings: Settings) -> Keyring:
    assert settings.keyring is not None
    return load_keyring(settings.keyring)


@pytest.fixture
def alice(settings: Settings) -> Signer:
    assert settings.approver_key is not None
    return Signer.open(settings.approver_key)


async def test_the_model_reads_the_rejection_message_and_takes_another_tool(
    temporal_client: Client,
    agent_worker: WorkerFactory,
    journal: JournalStore,
    keyring: Keyring,
    alice: Signer,
) -> None:
    async with agent_worker(
        {"reroute": REROUTE}, tools=sample_tools.TOOLS, keyring=keyring
    ) as worker:
        handle = await start_agent(
            temporal_client,
            worker.task_queue,
            AgentSagaRequest(
                prompt="grant acct-9 50 tokens",
                model="reroute",
                tools=["grant_tokens", "send_note"],
                policy="let_agent_recover",
            ),
        )
        waiting = await wait_for(handle, awaiting_approval)
        pending = waiting.pending_approval
        assert pending is not None and pending.tool_name == "grant_tokens"
        reject = Reject(
            journal_seq=pending.journal_seq,
            approver="alice",
            reason="wrong account",
            message=MESSAGE,
            input_hash=pending.input_hash,
        )
        signed = reject.model_copy(
            update={"signature": alice.sign(reject.statement(handle.id, pending.input_hash))}
        )
        await handle.signal("reject", signed)
        result = await handle.result()

    # the model was told who, why and what to do instead, and did it
    rejected, noted = result.steps
    assert rejected.tool == "grant_tokens" and rejected.status == "rejected"
    assert rejected.output == (
        "Not approved, the tool did not run. Rejected by alice. Reason: wrong account\n"
        f"{PREFIX}{MESSAGE}"
    )
    assert rejected.rejection is not None
    assert (rejected.rejection.by, rejected.rejection.reason) == ("alice", "wrong account")
    assert rejected.rejection.message == MESSAGE
    assert (noted.tool, noted.status, noted.arguments) == (
        "send_note",
        "executed",
        {"text": MESSAGE},
    )
    assert result.final_output is not None and result.final_output.startswith("Not granted")
    assert result.saga.status is SagaState.COMPLETED

    rows = await journal.read(handle.id)
    assert [(r.tool_name, r.phase) for r in rows] == [
        ("grant_tokens", Phase.AWAITING_APPROVAL),
        ("approval-gate", Phase.REJECTED),
        ("send_note", Phase.INTENT),
        ("send_note", Phase.EXECUTED),
    ]
    decision = json.loads(rows[1].payload)
    assert (decision["decision"], decision["by"]) == ("reject", "alice")
    assert (decision["reason"], decision["message"]) == ("wrong account", MESSAGE)
    assert json.loads(rows[2].input) == {"text": MESSAGE}
    # the signature covers the message: the row verifies as journaled
    check = DecisionCheck(handle.id, keyring)
    for row in rows:
        check.feed(row)
    check.finish()
    assert (check.problems, check.checked) == ([], 1)
