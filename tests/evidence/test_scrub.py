"""Scrubbing free text (exception messages) and redaction rules read from settings."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.errors import SettingsError
from sagacity.evidence.redaction import DEFAULT_RULES, Action, Redactor, Rule, parse_rules, scrub
from sagacity.journal import Draft, Phase, to_json
from sagacity.settings import Settings, load_settings
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState, Step
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import running_worker


@pytest.mark.parametrize(
    ("text", "scrubbed"),
    [
        # URL userinfo, whole: a token is often the user part (https://<token>@github.com)
        ("https://bob:hunter2@api.example.com/x", "https://[redacted]@api.example.com/x"),
        ("git+https://ghp_123@github.com/a/b", "git+https://[redacted]@github.com/a/b"),
        ("https://u:p@ss@host/", "https://[redacted]@host/"),
        # query parameters named by the rules; others kept
        ("GET /v1?api_key=sk-123&x=1#f", "GET /v1?api_key=[redacted]&x=1#f"),
        (
            "?access_token=a.b.c&client_secret=zz",
            "?access_token=[redacted]&client_secret=[redacted]",
        ),
        # credentials after a scheme, in or out of a header
        ("Authorization: Bearer abc.def", "Authorization: Bearer [redacted]"),
        ("authorization: basic dXNlcjpwYXNz==", "authorization: basic [redacted]"),
        # name=value, quoted or bare; trailing punctuation is not the value's
        ("login failed: password=hunter2, retry", "login failed: password=[redacted], retry"),
        ('cfg passwd="a b c" ok', 'cfg passwd="[redacted]" ok'),
        ("Authorization=Bearer abc.def next", "Authorization=[redacted] next"),
        # "name": value in JSON, and 'name': value in a Python dict's repr
        ('{"api_key": "sk-1", "n": 1}', '{"api_key": "[redacted]", "n": 1}'),
        ('{"password": "p\\"w", "secret": 42}', '{"password": "[redacted]", "secret": [redacted]}'),
        ("{'Cookie': 'sid=1', 'X-Id': 'r'}", "{'Cookie': '[redacted]', 'X-Id': 'r'}"),
    ],
)
def test_scrub_removes_credentials_and_says_so(text: str, scrubbed: str) -> None:
    assert scrub(text) == scrubbed
    assert scrub(scrubbed) == scrubbed  # a retry, or a second pass, writes the same text


@pytest.mark.parametrize(
    "text",
    [
        "the bearer of bad news",  # a plain lowercase word after the scheme is prose
        "Basic validation failed",
        "tokens_used=5 page=2 user=bob",  # words: tokens, used; page; user
        "postgres://db.internal:5432/app",  # no userinfo
        "mailto:bob@example.com",  # not scheme://
        "{'amount': 12, 'note': 'password reset'}",
        "ValueError: invalid literal for int() with base 10: 'abc'",
    ],
)
def test_scrub_leaves_what_is_not_a_credential(text: str) -> None:
    assert scrub(text) == text


def test_names_match_by_words_as_json_keys_do() -> None:
    # `token` is a word of token_count, so the value goes, as it would from {"token_count": 5}
    assert scrub("token_count=5 X-Api-Key=k apiKey=k2") == (
        "token_count=[redacted] X-Api-Key=[redacted] apiKey=[redacted]"
    )
    # the rules given are the rules used; URL credentials and schemes go whatever they are
    ssn = (Rule("ssn"),)
    assert scrub("ssn=123 password=p", ssn) == "ssn=[redacted] password=p"
    assert scrub("https://a:b@h Bearer x.y", ()) == "https://[redacted]@h Bearer [redacted]"


def test_a_hash_rule_leaves_the_digest() -> None:
    digest = hashlib.sha256(b"sk-1").hexdigest()
    hashed = scrub("api_key=sk-1", (Rule("api_key", Action.HASH),))
    assert hashed == f"api_key=[sha256:{digest}]"
    assert scrub(hashed, (Rule("api_key", Action.HASH),)) == hashed


def test_failure_rows_are_scrubbed_before_journaling_and_others_are_not() -> None:
    redactor = Redactor()
    message = "GET https://x/?api_key=sk-1 failed"
    payload = to_json({"type": "HTTPError", "message": message, "effect": "unknown"})
    for phase in (Phase.FAILED, Phase.COMPENSATION_FAILED):
        done = redactor.draft(Draft("s", "charge", phase, "{}", payload)).value
        assert "sk-1" not in done.payload and "api_key=[redacted]" in done.payload
        assert redactor.draft(done).value == done  # the same row, however often it is drafted
    executed = redactor.draft(Draft("s", "charge", Phase.EXECUTED, "{}", to_json(message)))
    assert "sk-1" in executed.value.payload  # a result is redacted by its keys only
    assert redactor.draft(Draft("s", "t", Phase.FAILED, "", "not json token=1")).value.payload == (
        "not json token=[redacted]"
    )


def test_rules_parse_from_text() -> None:
    assert parse_rules(" card_number:hash@pay_* , ssn ,") == (
        Rule("card_number", Action.HASH, "pay_*"),
        Rule("ssn"),
    )
    assert parse_rules("") == ()


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("ssn:erase", "the action is 'redact', 'remove' or 'hash'"),
        (":hash", "no field name"),
        ("--@pay", "no field name"),
        ("ssn@", "no tool pattern"),
    ],
)
def test_a_bad_rule_is_a_settings_error(
    text: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SAGACITY_REDACT", text)
    with pytest.raises(SettingsError, match="SAGACITY_REDACT") as raised:
        load_settings()
    assert says in str(raised.value)


def test_settings_add_to_the_built_in_rules_or_replace_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SAGACITY_REDACT", raising=False)
    assert load_settings().redactor().rules == DEFAULT_RULES
    monkeypatch.setenv("SAGACITY_REDACT", "token:hash@pay_*,ssn")
    # the settings' rules come first: the first rule that matches a key decides
    assert load_settings().redactor().rules == (
        Rule("token", Action.HASH, "pay_*"),
        Rule("ssn"),
        *DEFAULT_RULES,
    )
    monkeypatch.delenv("SAGACITY_REDACT")
    toml = tmp_path / "settings.toml"
    toml.write_text('redact = ["ssn:hash"]\nredact_defaults = false\n', encoding="utf-8")
    assert load_settings(settings_file=toml).redactor().rules == (Rule("ssn", Action.HASH),)
    toml.write_text("redact = [1]\n", encoding="utf-8")
    with pytest.raises(SettingsError, match="SAGACITY_REDACT"):
        load_settings(settings_file=toml)


async def test_the_shipped_worker_applies_the_rules_its_settings_name(
    settings: Settings,
    endpoints: Endpoints,
    database_url: str,
    temporal_client: Client,
    journal: JournalStore,
    task_queue: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SAGACITY_REDACT", "text:hash@send_*")
    configured = settings.model_copy(
        update={
            "redact": load_settings().redact,
            "database_url": database_url,
            "temporal_address": endpoints.temporal_address,
            "temporal_namespace": endpoints.temporal_namespace,
            "task_queue": task_queue,
            "log_interval": timedelta(0),
        }
    )
    sid = f"redact-settings-{uuid.uuid4().hex[:8]}"
    async with running_worker(configured, ["tests.temporal.sample_tools"], graceful_s=1):
        result = await temporal_client.execute_workflow(
            STEPS_WORKFLOW,
            SagaSpec(
                steps=[
                    Step(tool="send_note", args={"text": "the patient's diagnosis"}),
                    Step(tool="set_flag", args={"name": "the patient's diagnosis"}),
                ]
            ),
            id=sid,
            task_queue=task_queue,
            result_type=SagaResult,
        )
    assert result.status is SagaState.COMPLETED
    rows = await journal.read(sid)
    key = configured.redactor().key
    assert key is not None  # the session's fingerprint key, as the dev stack makes one
    digest = key.fingerprint("the patient's diagnosis")
    assert digest.startswith(f"hmac:{key.id}:")
    # send_note's `text` is fingerprinted, in its input and its result; set_flag is not send_*
    assert json.loads(rows[0].input) == {"text": {"$redacted": digest}}
    assert json.loads(rows[1].payload) == {"text": {"$redacted": digest}}
    assert json.loads(rows[2].input) == {"name": "the patient's diagnosis"}


@pytest.mark.parametrize(
    "text", ["a.b-c_d" * 30_000 + "=", "a+b.c-d" * 30_000, "'token': '" * 20_000, "=a" * 100_000]
)
def test_scrubbing_a_large_message_takes_linear_time(text: str) -> None:
    start = time.perf_counter()
    scrub(text)
    assert time.perf_counter() - start < 2.0  # quadratic, these took minutes
