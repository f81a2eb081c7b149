"""Redaction: secrets are replaced before a row is journaled, and never reach Postgres."""

from __future__ import annotations

import hashlib
import json
import uuid
from datetime import timedelta

import psycopg
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity import CompensationContext, compensable
from sagacity.evidence.redaction import MARKER, Action, Redactor, Rule
from sagacity.journal import Draft, Phase, to_json
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.workflow import WORKFLOW_NAME

SECRETS = ("sk-live-123", "hunter2", "Bearer abc.def", "refresh-999", "s3cr3t")

CALL = {
    "url": "https://api.example.com/charge",
    "api_key": "sk-live-123",
    "login": {"user": "zoë", "password": "hunter2"},
    "headers": [{"Authorization": "Bearer abc.def"}, {"X-Request-Id": "r-1"}],
    "refreshToken": "refresh-999",
    "tokens_used": 412,
    "clientSecret": "s3cr3t",
}


def test_default_rules_redact_secrets_by_name_and_say_where() -> None:
    done = Redactor().apply("charge", CALL)

    assert done.paths == (
        "/api_key",
        "/login/password",
        "/headers/0/Authorization",
        "/refreshToken",
        "/clientSecret",
    )
    text = to_json(done.value)
    assert not any(secret in text for secret in SECRETS)
    assert done.value["headers"][0]["Authorization"] == {MARKER: "removed"}
    # what is not a secret is kept as it was
    assert done.value["tokens_used"] == 412 and done.value["login"]["user"] == "zoë"
    assert CALL["api_key"] == "sk-live-123"  # the caller's value is not changed


def test_hash_rule_keeps_a_checkable_digest_for_its_tools_only() -> None:
    redactor = Redactor([Rule("card_number", Action.HASH, tools="charge_*")])

    charged = redactor.apply("charge_card", {"card_number": "4242424242424242", "amount": 5})
    other = redactor.apply("refund", {"card_number": "4242424242424242"})

    digest = hashlib.sha256(b"4242424242424242").hexdigest()
    assert charged.value == {"card_number": {MARKER: f"sha256:{digest}"}, "amount": 5}
    assert other.paths == () and other.value == {"card_number": "4242424242424242"}


def test_json_text_is_kept_byte_for_byte_unless_something_is_redacted() -> None:
    redactor = Redactor()
    plain = '{"b": 1,  "a": "x"}'
    assert redactor.text("t", plain).value == plain  # spacing and key order kept
    assert redactor.text("t", "approver=alice").value == "approver=alice"  # not JSON
    once = redactor.text("t", '{"token": "abc"}')
    assert once.value == '{"token":{"$redacted":"removed"}}'
    assert redactor.text("t", once.value).value == once.value  # already redacted: no change


async def test_redacted_rows_keep_secrets_out_of_postgres_and_the_chain_verifies(
    journal: JournalStore, owner: psycopg.AsyncConnection, saga_id: str
) -> None:
    redactor = Redactor()
    args = json.dumps(CALL, ensure_ascii=False)
    result = to_json({"charge_id": "ch_1", "session_token": "refresh-999"})
    for draft in (
        Draft(saga_id, "charge", Phase.INTENT, args),
        Draft(saga_id, "charge", Phase.EXECUTED, args, result),
    ):
        redacted = redactor.draft(draft)
        assert "/input/api_key" in redacted.paths
        await journal.append(redacted.value)

    cur = await owner.execute(
        "SELECT saga_id, seq, tool_name, phase, input, payload, hash FROM side_effect_journal"
        " WHERE saga_id = %s",
        (saga_id,),
    )
    stored = json.dumps(await cur.fetchall(), ensure_ascii=False)
    assert not any(secret in stored for secret in SECRETS)
    assert "ch_1" in stored and "zoë" in stored
    verdict = await journal.verify(saga_id)
    assert verdict.ok and verdict.rows == 2


@compensable(by="void_charge")
def charge_with_key(amount: int, api_key: str) -> dict[str, str]:
    """A tool whose input and result both carry secrets."""
    return {"charge_id": f"ch-{amount}", "session_token": "refresh-999"}


def void_charge(ctx: CompensationContext) -> None:
    pass


async def test_a_saga_journals_no_secret(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    owner: psycopg.AsyncConnection,
) -> None:
    plugin = SagacityPlugin(
        journal=journal, approvals=approvals, tools=[charge_with_key], redactor=Redactor()
    )
    saga = f"ev-redact-{uuid.uuid4().hex[:8]}"
    spec = SagaSpec(steps=[Step(tool="charge_with_key", args={"amount": 5, "api_key": SECRETS[0]})])
    async with Worker(
        temporal_client,
        task_queue=task_queue,
        plugins=[plugin],
        graceful_shutdown_timeout=timedelta(seconds=1),
    ):
        result = await temporal_client.execute_workflow(
            WORKFLOW_NAME, spec, id=saga, task_queue=task_queue, result_type=SagaResult
        )

    assert result.status is SagaState.COMPLETED
    cur = await owner.execute(
        "SELECT input, payload FROM side_effect_journal WHERE saga_id = %s", (saga,)
    )
    stored = json.dumps(await cur.fetchall())
    assert "ch-5" in stored and not any(secret in stored for secret in SECRETS)
    assert (await journal.verify(saga)).ok
