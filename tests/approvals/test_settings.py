"""The approvals settings as an operator writes them in the environment."""

from __future__ import annotations

from pathlib import Path

import pytest

from sagacity.errors import SettingsError
from sagacity.settings import load_settings


def test_tokens_and_allow_list_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SAGACITY_APPROVAL_TOKENS", "s3cret=alice, t0ken = bob")
    monkeypatch.setenv("SAGACITY_APPROVERS", "send_confirmation=alice|bob,*=carol")
    settings = load_settings()
    assert settings.approval_tokens == {"s3cret": "alice", "t0ken": "bob"}
    assert settings.approvers == {"send_confirmation": ["alice", "bob"], "*": ["carol"]}
    assert "s3cret" not in repr(settings)


def test_unset_means_no_tokens_and_no_allow_list(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # a data folder the dev stack never set up: it would make the local user a token
    monkeypatch.setenv("SAGACITY_DATA_DIR", str(tmp_path))
    monkeypatch.delenv("SAGACITY_APPROVAL_TOKENS", raising=False)
    monkeypatch.delenv("SAGACITY_APPROVAL_TOKENS_FILE", raising=False)
    monkeypatch.setenv("SAGACITY_APPROVERS", "")
    settings = load_settings()
    assert settings.approval_tokens is None and settings.approvers is None


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("SAGACITY_APPROVAL_TOKENS", "alice"),
        ("SAGACITY_APPROVAL_TOKENS", "t=alice,t=bob"),
        ("SAGACITY_APPROVERS", "send_confirmation="),
    ],
)
def test_malformed_values_name_the_variable(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError, match=variable):
        load_settings()
