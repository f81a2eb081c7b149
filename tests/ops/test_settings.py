"""Worker settings from the environment and from ``SAGACITY_SETTINGS_FILE``; wrong ones stop the start."""

from __future__ import annotations

import socket
from datetime import timedelta
from pathlib import Path

import pytest

from sagacity.errors import SettingsError
from sagacity.settings import load_settings
from sagacity.temporal.codec import new_codec_key
from tests.ops.conftest import Cli

NAMES = ("SAGACITY_TASK_QUEUE", "SAGACITY_LOG_FORMAT", "SAGACITY_GRACEFUL_SHUTDOWN")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (*NAMES, "SAGACITY_SETTINGS_FILE", "SAGACITY_METRICS_ADDRESS"):
        monkeypatch.delenv(name, raising=False)


def test_a_toml_file_is_read_under_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "sagacity.toml"
    file.write_text('task_queue = "orders"\nlog_format = "json"\ngraceful_shutdown = 45\n')
    monkeypatch.setenv("SAGACITY_SETTINGS_FILE", str(file))
    settings = load_settings()
    assert (settings.task_queue, settings.log_format) == ("orders", "json")
    assert settings.graceful_shutdown == timedelta(seconds=45)

    monkeypatch.setenv("SAGACITY_TASK_QUEUE", "from-the-environment")
    assert load_settings().task_queue == "from-the-environment"


def test_an_env_file_works_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    file = tmp_path / "worker.env"
    file.write_text("SAGACITY_METRICS_ADDRESS=0.0.0.0:9464\nSAGACITY_GRACEFUL_SHUTDOWN=PT1M\n")
    monkeypatch.setenv("SAGACITY_SETTINGS_FILE", str(file))
    settings = load_settings()
    assert settings.metrics_address == "0.0.0.0:9464"
    assert settings.graceful_shutdown == timedelta(minutes=1)


@pytest.mark.parametrize(
    ("name", "attribute"),
    [
        ("SAGACITY_GRACEFUL_SHUTDOWN", "graceful_shutdown"),
        ("SAGACITY_OUTAGE_WINDOW", "outage_window"),
        ("SAGACITY_APPROVAL_DEADLINE", "approval_deadline"),
        ("SAGACITY_LOG_INTERVAL", "log_interval"),
        ("SAGACITY_RETENTION_PERIOD", "retention_period"),
    ],
)
def test_every_duration_takes_bare_seconds_as_well_as_iso_8601(
    monkeypatch: pytest.MonkeyPatch, name: str, attribute: str
) -> None:
    for given, meant in (("90", timedelta(seconds=90)), ("PT2M", timedelta(minutes=2))):
        monkeypatch.setenv(name, given)
        assert getattr(load_settings(), attribute) == meant


def test_a_log_interval_of_0_turns_the_workers_log_pass_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # as the setting's description says; it was refused as "not a valid timedelta"
    monkeypatch.setenv("SAGACITY_LOG_INTERVAL", "0")
    assert load_settings().log_interval == timedelta(0)


def test_a_wrong_setting_names_itself_and_what_was_expected(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    file = tmp_path / "sagacity.toml"
    file.write_text('log_format = "xml"\n')
    monkeypatch.setenv("SAGACITY_SETTINGS_FILE", str(file))
    monkeypatch.setenv("SAGACITY_GRACEFUL_SHUTDOWN", "soon")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    message = str(caught.value)
    assert "SAGACITY_LOG_FORMAT: Input should be 'text' or 'json' (got 'xml')" in message
    assert "SAGACITY_GRACEFUL_SHUTDOWN" in message and "'soon'" in message


@pytest.mark.parametrize(
    ("content", "said"),
    [(None, "no such file"), ("task_queue = ", "is not valid TOML")],
)
def test_a_settings_file_that_cannot_be_read_stops_the_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, content: str | None, said: str
) -> None:
    file = tmp_path / "sagacity.toml"
    if content is not None:
        file.write_text(content)
    monkeypatch.setenv("SAGACITY_SETTINGS_FILE", str(file))
    with pytest.raises(SettingsError, match=f"SAGACITY_SETTINGS_FILE: .*{said}"):
        load_settings()


async def test_the_worker_refuses_to_start_on_a_wrong_setting(sagacity: Cli) -> None:
    refused = await sagacity("worker", extra_env={"SAGACITY_METRICS_ADDRESS": "9464"})
    assert refused.code == 2
    assert "SAGACITY_METRICS_ADDRESS" in refused.stderr and "'9464'" in refused.stderr


async def test_a_metrics_port_in_use_is_named_at_start(cli: Cli) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        address = f"127.0.0.1:{taken.getsockname()[1]}"
        refused = await cli("worker", extra_env={"SAGACITY_METRICS_ADDRESS": address})
    assert refused.code == 2
    assert f"SAGACITY_METRICS_ADDRESS: cannot listen on {address}" in refused.stderr


def test_codec_keys_come_from_the_environment_a_toml_list_or_a_key_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first, second = new_codec_key("k2"), new_codec_key("k1")
    monkeypatch.delenv("SAGACITY_CODEC_KEYS_FILE")
    monkeypatch.setenv("SAGACITY_CODEC_KEYS", f"{first},{second}")
    codec = load_settings().payload_codec()
    assert codec is not None and codec.key_ids == ("k2", "k1")  # the first encrypts
    monkeypatch.delenv("SAGACITY_CODEC_KEYS")

    toml = tmp_path / "sagacity.toml"
    toml.write_text(f"codec_keys = [{first!r}, {second!r}]\n".replace("'", '"'))
    monkeypatch.setenv("SAGACITY_SETTINGS_FILE", str(toml))
    codec = load_settings().payload_codec()
    assert codec is not None and codec.key_ids == ("k2", "k1")
    monkeypatch.delenv("SAGACITY_SETTINGS_FILE")

    keys = tmp_path / "codec-keys"
    keys.write_text(f"# rotated on 2026-12-03\n{first}\n{second}  # retired\n")
    monkeypatch.setenv("SAGACITY_CODEC_KEYS_FILE", str(keys))
    codec = load_settings().payload_codec()
    assert codec is not None and codec.key_ids == ("k2", "k1")


def test_a_wrong_codec_key_names_its_setting_and_never_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "c2VjcmV0LWJ1dC10b28tc2hvcnQ="
    monkeypatch.setenv("SAGACITY_CODEC_KEYS", f"k1={secret}")
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert "SAGACITY_CODEC_KEYS" in str(caught.value) and secret not in str(caught.value)

    monkeypatch.setenv("SAGACITY_CODEC_KEYS", new_codec_key("k1"))
    with pytest.raises(SettingsError, match="not both"):
        load_settings().payload_codec()  # the session's key file is set too

    monkeypatch.delenv("SAGACITY_CODEC_KEYS")
    keys = tmp_path / "codec-keys"
    keys.write_text(f"k1={secret}\n")
    monkeypatch.setenv("SAGACITY_CODEC_KEYS_FILE", str(keys))
    with pytest.raises(SettingsError) as caught:
        load_settings().payload_codec()
    assert "SAGACITY_CODEC_KEYS_FILE" in str(caught.value) and secret not in str(caught.value)
