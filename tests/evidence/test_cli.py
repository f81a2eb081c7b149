"""``sagacity verify``, ``export`` and ``keygen`` as an operator runs them (in-process CLI)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.journal import Draft, Phase
from sagacity.store import JournalStore
from tests.approvals.conftest import CliResult
from tests.evidence.conftest import anchored_saga
from tests.evidence.test_retention import idle_saga
from tests.ops.conftest import Cli, pinned_trust


def anchored_env(writer: CheckpointWriter, signing_key: Path) -> dict[str, str]:
    """The worker's anchors, and its key pinned in a trust file kept apart from them."""
    trust = pinned_trust(signing_key, writer.path.parent / "trust")
    return {
        "SAGACITY_CHECKPOINT_DIR": str(writer.path),
        "SAGACITY_SIGNING_KEY": str(signing_key),
        "SAGACITY_TRUST_FILE": str(trust),
    }


def json_lines(result: CliResult) -> list[dict[str, Any]]:
    return [json.loads(line) for line in result.stdout.splitlines()]


async def test_verify_report_names_saga_seq_fault_and_anchor(
    sagacity: Cli,
    journal: JournalStore,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
) -> None:
    clean = saga_id + "-clean"
    await anchored_saga(journal, writer, saga_id)
    await anchored_saga(journal, writer, clean)
    await owner.execute(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 4", (saga_id,)
    )

    result = await sagacity("verify", saga_id, clean, extra_env=anchored_env(writer, signing_key))

    assert result.code == 1, result.stderr
    failed, *details = result.stdout.split(f"ok      {clean}")[0].splitlines()
    assert failed == f"FAILED  {saga_id}"
    assert details[0].split()[:4] == ["checkpoint", "seq", "5", "disagrees:"]
    assert "the journal has no row 5 (it ends at seq 4): rows were removed" in details[0]
    assert f"ok      {clean}  6 rows  [checkpoint agrees at seq 6" in result.stdout
    assert result.stdout.endswith("2 sagas, 10 rows: 1 failed\n")


async def test_verify_json_and_the_warning_without_checkpoints(
    sagacity: Cli, journal: JournalStore, saga_id: str
) -> None:
    await anchored_saga(journal, None, saga_id, calls=1)

    result = await sagacity("verify", saga_id, "--json")

    assert result.code == 0
    report, summary = json_lines(result)
    assert report["saga_id"] == saga_id and report["ok"] is True and report["rows"] == 2
    assert summary == {
        "summary": {"ok": True, "sagas": 1, "rows": 2, "failed": 0, "problems": [], "warnings": 0}
    }
    assert report["warnings"] == []
    assert "no checkpoint directory" in result.stderr and "cannot be detected" in result.stderr


async def test_an_intent_with_no_outcome_is_a_warning_naming_saga_and_seq(
    sagacity: Cli,
    journal: JournalStore,
    writer: CheckpointWriter,
    signing_key: Path,
    saga_id: str,
) -> None:
    """A call whose outcome is unknown (SUSPECT, or still running) is shown, and verifies."""
    await anchored_saga(journal, writer, saga_id, calls=2)
    row = await journal.append(Draft(saga_id, "refund", Phase.INTENT, '{"amount": 5}'))
    writer.record(saga_id, row.seq, row.hash)
    env = anchored_env(writer, signing_key)

    text = await sagacity("verify", saga_id, extra_env=env)
    as_json = await sagacity("verify", saga_id, "--json", extra_env=env)

    assert text.code == 0, text.stdout + text.stderr
    assert (
        f"WARNING {saga_id} seq 5: INTENT of 'refund' has no EXECUTED or FAILED after it: the "
        "call's outcome is unknown (SUSPECT until a human resolves it, or still running)"
    ) in text.stdout
    assert text.stdout.endswith(
        "1 sagas, 5 rows: all verified, 1 warning (calls whose outcome is unknown)\n"
    )
    assert as_json.code == 0, as_json.stdout
    report, summary = json_lines(as_json)
    assert report["saga_id"] == saga_id and report["ok"] is True
    assert [(w["kind"], w["seq"]) for w in report["warnings"]] == [("dangling_intent", 5)]
    assert summary["summary"]["ok"] is True and summary["summary"]["warnings"] == 1


async def test_usage_errors_exit_2(sagacity: Cli, tmp_path: Path) -> None:
    nothing = await sagacity("verify")
    both = await sagacity("verify", "--bundle", str(tmp_path), "some-saga")
    keyless = await sagacity("verify", "s", extra_env={"SAGACITY_CHECKPOINT_DIR": str(tmp_path)})
    no_choice = await sagacity("export", "--out", str(tmp_path / "b"))

    assert [r.code for r in (nothing, both, keyless, no_choice)] == [2, 2, 2, 2]
    assert "name the sagas to verify" in nothing.stderr
    assert "takes no saga ids" in both.stderr
    assert "checkpoints need a trust root" in keyless.stderr
    assert "name sagas, or give --since/--until" in no_choice.stderr


async def test_keygen_then_export_a_time_window_then_verify_the_bundle(
    sagacity: Cli, journal: JournalStore, tmp_path: Path, saga_id: str
) -> None:
    key = tmp_path / "signing.pem"
    made = await sagacity("keygen", str(key))
    again = await sagacity("keygen", str(key))
    assert made.code == 0 and again.code == 1 and "refusing to replace" in again.stderr
    assert (tmp_path / "signing.pem.pub").read_text().startswith("-----BEGIN PUBLIC KEY-----")
    fingerprint = made.stdout.split("fingerprint: ")[1].strip()

    env = {"SAGACITY_CHECKPOINT_DIR": str(tmp_path / "cp"), "SAGACITY_SIGNING_KEY": str(key)}
    writer = CheckpointWriter.open(tmp_path / "cp", key)
    await anchored_saga(journal, writer, saga_id, calls=1)
    since = (datetime.now(UTC) - timedelta(minutes=1)).strftime("%Y-%m-%dT%H:%M:%S")
    out = tmp_path / "window"
    exported = await sagacity(
        "export", "--since", since, "--out", str(out), "--json", extra_env=env
    )
    assert exported.code == 0, exported.stderr
    assert exported.json()["key_id"] == fingerprint

    checked = await sagacity("verify", "--bundle", str(out), "--json", extra_env=env)
    *sagas, summary = json_lines(checked)
    mine = [s for s in sagas if s["saga_id"] == saga_id]
    assert len(mine) == 1 and mine[0]["ok"] is True
    assert {"source": "checkpoint", "agreement": "agrees"}.items() <= mine[0]["anchors"][1].items()
    # the window also holds other tests' sagas, written with no checkpoints: those fail
    assert summary["summary"]["sagas"] == len(sagas)


async def test_retention_from_the_command_line(
    sagacity: Cli,
    owner: psycopg.AsyncConnection,
    writer: CheckpointWriter,
    signing_key: Path,
    retention_url: str,
    tmp_path: Path,
) -> None:
    saga_id = f"ev-old-cli-{uuid.uuid4().hex[:8]}"
    await idle_saga(owner, writer, saga_id)

    done = await sagacity(
        "export",
        "--purge",
        "--out",
        str(tmp_path / "retained"),
        "--database-url",
        retention_url,
        "--json",
        extra_env=anchored_env(writer, signing_key),
    )
    too_short = await sagacity(
        "export", "--purge", "--older-than", "P30D", "--out", str(tmp_path / "x")
    )

    assert done.code == 0, done.stderr
    assert done.json()["purged"][saga_id] == 4
    assert too_short.code == 1 and "shorter than the minimum" in too_short.stderr
