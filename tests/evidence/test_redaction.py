"""Redaction: secrets are replaced before a row is journaled, and never reach Postgres."""

from __future__ import annotations

import gc
import hashlib
import hmac
import json
import uuid
from datetime import timedelta
from pathlib import Path

import psycopg
import pytest
from temporalio.client import Client
from temporalio.worker import Worker

from sagacity import CompensationContext, compensable
from sagacity.errors import EvidenceUnavailable
from sagacity.evidence.keys import generate_fingerprint_key, load_fingerprint_key
from sagacity.evidence.redaction import (
    MARKER,
    Action,
    FingerprintKey,
    Redactor,
    Rule,
    could_be,
    hidden_paths,
)
from sagacity.journal import Draft, Phase, to_json
from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.plugin import SagacityPlugin
from sagacity.temporal.workflow import STEPS_WORKFLOW

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


def test_redacting_leaves_nothing_for_the_cycle_collector() -> None:
    # every row a worker journals is redacted: what each left in a reference cycle would live
    # on until the collector's full passes, which walk the whole heap, free it
    redactor = Redactor()
    gc.collect()
    gc.disable()
    try:
        for _ in range(20):
            assert redactor.apply("charge", CALL).paths
        left = gc.collect()
    finally:
        gc.enable()
    assert left == 0


def test_hash_rule_keeps_a_checkable_digest_for_its_tools_only() -> None:
    redactor = Redactor([Rule("card_number", Action.HASH, tools="charge_*")])

    charged = redactor.apply("charge_card", {"card_number": "4242424242424242", "amount": 5})
    other = redactor.apply("refund", {"card_number": "4242424242424242"})

    digest = hashlib.sha256(b"4242424242424242").hexdigest()
    assert charged.value == {"card_number": {MARKER: f"sha256:{digest}"}, "amount": 5}
    assert other.paths == () and other.value == {"card_number": "4242424242424242"}


def test_a_keyed_fingerprint_tells_values_apart_and_needs_the_key() -> None:
    key, other_key = FingerprintKey(b"k" * 32), FingerprintKey(b"o" * 32)
    rules = [Rule("token"), Rule("card", Action.HASH), Rule("ssn", Action.REMOVE)]
    keyed, keyed_elsewhere = Redactor(rules, key=key), Redactor(rules, key=other_key)

    def shown(redactor: Redactor, **call: object) -> dict[str, str]:
        value = redactor.apply("grant", call).value
        return {name: value[name][MARKER] for name in call}

    big, small = shown(keyed, token_amount=1_000_000), shown(keyed, token_amount=5)
    assert big["token_amount"] != small["token_amount"]  # what removal or a digest hid
    assert shown(keyed, token_amount=5) == small  # one value, one fingerprint
    assert shown(keyed_elsewhere, token_amount=5) != small  # and only under this key
    expected = hmac.new(b"k" * 32, b"5", hashlib.sha256).hexdigest()
    assert small["token_amount"] == f"hmac:{key.id}:{expected}"
    # `hash` is keyed too once there is a key; `remove` shows nothing, key or not
    both = shown(keyed, card="4242", ssn="078-05-1120")
    assert both["card"].startswith(f"hmac:{key.id}:") and both["ssn"] == "removed"
    # without a key: `redact` removes, `hash` digests unkeyed (as before keys existed)
    unkeyed = shown(Redactor(rules), token_amount=5, card="4242")
    assert unkeyed == {
        "token_amount": "removed",
        "card": "sha256:" + hashlib.sha256(b"4242").hexdigest(),
    }
    assert "k" * 32 not in repr(key)


def test_hidden_paths_name_every_marker() -> None:
    redacted = Redactor(key=FingerprintKey(b"k" * 16)).apply("t", CALL)
    assert hidden_paths(to_json(redacted.value)) == tuple(sorted(redacted.paths))
    assert hidden_paths('{"a": [1, {"$redacted": "removed"}]}') == ("/a/1",)
    assert hidden_paths("not json") == hidden_paths('{"a": 1}') == ()


def test_a_row_redacted_under_other_rules_or_keys_still_records_its_call() -> None:
    call = {"amount": 5, "login": {"user": "zoë", "password": "hunter2"}, "tags": ["a"]}
    under = [Redactor(), Redactor(key=FingerprintKey(b"k" * 16)), Redactor([])]
    for redactor in under:
        assert could_be(redactor.apply("t", call).value, call)
    other = {**call, "amount": 6}
    assert not could_be(Redactor().apply("t", other).value, call)  # not where nothing is hidden
    assert not could_be({**call, "extra": 1}, call) and not could_be({"tags": ["a", "b"]}, call)


def test_a_fingerprint_key_file_is_made_once_and_a_bad_one_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "fingerprint-key"
    made = generate_fingerprint_key(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_fingerprint_key(path) == made
    with pytest.raises(EvidenceUnavailable, match="refusing to replace"):
        generate_fingerprint_key(path)
    for text in ("replace with the file", "abcd", ""):
        path.write_text(text)
        with pytest.raises(EvidenceUnavailable, match="not a fingerprint key"):
            load_fingerprint_key(path)
    with pytest.raises(EvidenceUnavailable, match="cannot read"):
        load_fingerprint_key(tmp_path / "missing")


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
            STEPS_WORKFLOW, spec, id=saga, task_queue=task_queue, result_type=SagaResult
        )

    assert result.status is SagaState.COMPLETED
    cur = await owner.execute(
        "SELECT input, payload FROM side_effect_journal WHERE saga_id = %s", (saga,)
    )
    stored = json.dumps(await cur.fetchall())
    assert "ch-5" in stored and not any(secret in stored for secret in SECRETS)
    assert (await journal.verify(saga)).ok
