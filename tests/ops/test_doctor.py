"""``sagacity doctor`` against real Postgres: the dev stack's defaults pass; each weakening setting
or grant makes it exit 1 naming the finding; what it cannot check is an error, not a verdict.

The database is one of this module's own, so sagas other tests leave (old ones included) do not
change the verdict; grants changed for a test are put back after it.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import uuid4

import psycopg
import pytest
from psycopg.conninfo import make_conninfo
from typer.testing import CliRunner

from sagacity.cli.main import app as main_app
from sagacity.devstack import DevStack, Endpoints
from sagacity.settings import Settings
from sagacity.store.databases import drop_database, ensure_database
from tests import test_devstack
from tests.conftest import scratch_database
from tests.ops.conftest import anchor_env

# a data folder of the test's own, for an embedded Postgres: shared by name
private_data_dir = test_devstack.private_data_dir


@dataclass
class Ran:
    code: int
    stdout: str
    stderr: str

    def report(self) -> dict[str, Any]:
        parsed: dict[str, Any] = json.loads(self.stdout)
        return parsed

    def ids(self) -> set[str]:
        return {f["id"] for f in self.report()["findings"]}


async def doctor(env: Mapping[str, str | None], *args: str) -> Ran:
    """``sagacity doctor`` in this process with ``env`` over the test's (None: unset)."""
    result = await asyncio.to_thread(
        CliRunner().invoke, main_app, ["doctor", *args], env={"SAGACITY_SOFT_EXIT": "1", **env}
    )
    # a clear error, never a traceback
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.stdout + result.stderr
    return Ran(result.exit_code, result.stdout, result.stderr)


@pytest.fixture(scope="module")
async def doctor_database(endpoints: Endpoints) -> AsyncIterator[tuple[str, str]]:
    async with scratch_database(endpoints, "sagacity_doctor") as urls:
        yield urls


@pytest.fixture
def owner_url(doctor_database: tuple[str, str]) -> str:
    return doctor_database[0]


@pytest.fixture
async def owner(owner_url: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(owner_url, autocommit=True) as conn:
        yield conn


async def doctor_while(
    owner: psycopg.AsyncConnection[Any], change: str, undo: str, env: Mapping[str, str | None]
) -> Ran:
    """``sagacity doctor --json`` while the owner's ``change`` holds; ``undo`` puts it back."""
    await owner.execute(change)
    try:
        return await doctor(env, "--json")
    finally:
        await owner.execute(undo)


@pytest.fixture
def env(settings: Settings, doctor_database: tuple[str, str]) -> dict[str, str | None]:
    """A worker's settings as ``sagacity dev`` exports them: the app login, anchors, keyring,
    fingerprint key and (from the session) codec keys."""
    return {"SAGACITY_DATABASE_URL": doctor_database[1], **anchor_env(settings)}


async def test_the_dev_stacks_defaults_pass(private_data_dir: Path) -> None:
    # a new user's set-up: the embedded Postgres and the keys `sagacity dev` makes, nothing set
    # (not the session's codec keys: the dev stack makes its own)
    fresh = Settings(database_url=None, codec_keys_file=None, data_dir=private_data_dir)
    stack = DevStack(fresh, temporal=False)
    await stack.start()
    try:
        setup = await stack.prepare()
        unset: dict[str, str | None] = {
            name: None for name in os.environ if name.startswith("SAGACITY_")
        }
        nothing_pasted = await doctor(
            {**unset, "SAGACITY_DATA_DIR": str(private_data_dir)}, "--json"
        )
        assert (nothing_pasted.code, nothing_pasted.report()["findings"]) == (0, []), nothing_pasted
        assert nothing_pasted.report() == {"clean": True, "role": "sagacity_app", "findings": []}
        # the exports `sagacity dev` prints, pasted
        exports = {f"SAGACITY_{k.upper()}": str(v) for k, v in setup.settings().items()}
        pasted = await doctor({**unset, **exports})
        assert pasted.code == 0, pasted
        assert "0 findings for workers logging in as sagacity_app" in pasted.stdout
    finally:
        await stack.stop()


async def test_a_worker_logged_in_as_the_tables_owner_fails(
    env: dict[str, str | None], owner_url: str
) -> None:
    ran = await doctor({**env, "SAGACITY_DATABASE_URL": owner_url})
    assert ran.code == 1, ran
    assert "writable_journal" in ran.stdout and "sagacity_app" in ran.stdout  # the fix
    ran = await doctor({**env, "SAGACITY_DATABASE_URL": owner_url}, "--json")
    (finding,) = ran.report()["findings"]
    assert finding["id"] == "writable_journal" and finding["severity"] == "error"
    assert "side_effect_journal" in finding["what"] or "superuser" in finding["what"]


async def test_an_app_login_that_may_rewrite_another_append_only_table_fails(
    env: dict[str, str | None], owner: psycopg.AsyncConnection[Any]
) -> None:
    ran = await doctor_while(
        owner,
        "GRANT UPDATE ON sagacity_tlog_leaf TO sagacity_app",
        "REVOKE UPDATE ON sagacity_tlog_leaf FROM sagacity_app",
        env,
    )
    assert ran.code == 1 and ran.ids() == {"writable_journal"}, ran
    (finding,) = ran.report()["findings"]
    assert (
        "role sagacity_app may UPDATE (as sagacity_app) on public.sagacity_tlog_leaf"
        in finding["what"]
    )
    assert (await doctor(env)).code == 0


async def test_a_shadow_of_the_journal_fails(
    env: dict[str, str | None], owner: psycopg.AsyncConnection[Any]
) -> None:
    # a copy in the app's own schema, ahead of the journal's on its search path
    ran = await doctor_while(
        owner,
        "CREATE TABLE sagacity_app.side_effect_journal (LIKE public.side_effect_journal)",
        "DROP TABLE sagacity_app.side_effect_journal",
        env,
    )
    assert ran.code == 1 and ran.ids() == {"shadowed_journal"}, ran
    (finding,) = ran.report()["findings"]
    assert "DROP TABLE sagacity_app.side_effect_journal" in finding["what"]
    assert (await doctor(env)).code == 0


@pytest.mark.parametrize(
    ("change", "finding"),
    [
        (
            {
                "SAGACITY_SIGNING_KEY": None,
                "SAGACITY_CHECKPOINT_DIR": None,
                "SAGACITY_CHECKPOINT_PUBLIC_KEY": None,
            },
            "anchors_off",
        ),
        ({"SAGACITY_LOG_INTERVAL": "PT0S"}, "transparency_log_off"),
        ({"SAGACITY_KEYRING": None}, "keyring_missing"),
        ({"SAGACITY_REDACT_DEFAULTS": "false"}, "redaction_off"),
        (
            {"SAGACITY_REDACT_DEFAULTS": "false", "SAGACITY_REDACT": "iban"},
            "redaction_defaults_off",
        ),
        ({"SAGACITY_CODEC_KEYS_FILE": None}, "codec_off"),
        ({"SAGACITY_OUTAGE_WINDOW": "0"}, "outage_window_off"),
        ({"SAGACITY_RETENTION_PERIOD": "P30D"}, "retention_too_short"),
    ],
)
async def test_each_weakening_setting_fails_naming_it(
    env: dict[str, str | None], change: dict[str, str | None], finding: str
) -> None:
    assert (await doctor(env)).code == 0
    ran = await doctor({**env, **change}, "--json")
    assert ran.code == 1 and ran.ids() == {finding}, ran
    assert all(f["fix"] for f in ran.report()["findings"])


async def test_a_trust_root_the_workers_could_swap_fails(
    env: dict[str, str | None], settings: Settings, tmp_path: Path
) -> None:
    assert settings.checkpoint_dir is not None and settings.trust_file is not None
    planted = settings.checkpoint_dir / "trust.json"
    planted.write_bytes(settings.trust_file.read_bytes())
    try:
        ran = await doctor({**env, "SAGACITY_TRUST_FILE": str(planted)}, "--json")
    finally:
        planted.unlink()
    assert ran.code == 1 and ran.ids() == {"trust_root_writable"}, ran
    (finding,) = ran.report()["findings"]
    assert f"lies in {settings.checkpoint_dir}, a folder the workers write" in finding["what"]

    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    loose = shared / "trust.json"
    loose.write_bytes(settings.trust_file.read_bytes())
    ran = await doctor({**env, "SAGACITY_TRUST_FILE": str(loose)}, "--json")
    assert ran.code == 1 and ran.ids() == {"trust_root_writable"}, ran
    assert "writable by others than its owner" in ran.report()["findings"][0]["what"]
    assert (await doctor({**env, "SAGACITY_TRUST_FILE": str(settings.trust_file)})).code == 0


async def test_a_pool_that_cannot_notice_a_vanished_server_fails(
    env: dict[str, str | None], doctor_database: tuple[str, str]
) -> None:
    url = make_conninfo(doctor_database[1], keepalives=0)
    ran = await doctor({**env, "SAGACITY_DATABASE_URL": url}, "--json")
    assert ran.code == 1 and ran.ids() == {"pool_keepalives_off"}, ran


async def test_a_journal_nobody_can_purge_or_nobody_purges_fails(
    env: dict[str, str | None], owner: psycopg.AsyncConnection[Any]
) -> None:
    ran = await doctor_while(
        owner,
        "REVOKE DELETE ON side_effect_journal FROM sagacity_retention",
        "GRANT DELETE ON side_effect_journal TO sagacity_retention",
        env,
    )
    assert ran.code == 1 and ran.ids() == {"retention_role_missing"}, ran

    # a saga idle for a year, past the 183-day default: retention does not run
    old_saga = (
        "INSERT INTO side_effect_journal (saga_id, seq, tool_name, phase, timestamp, hash)"
        " VALUES ('doctor-old', 1, 'a', 'INTENT', now() AT TIME ZONE 'UTC' - interval '365 days',"
        " repeat('0', 64))",
        "DELETE FROM side_effect_journal WHERE saga_id = 'doctor-old'",
    )
    ran = await doctor_while(owner, *old_saga, env)
    assert ran.code == 1 and ran.ids() == {"retention_overdue"}, ran
    assert ran.report()["findings"][0]["what"].startswith("1 sagas idle longer")
    longer = await doctor_while(owner, *old_saga, {**env, "SAGACITY_RETENTION_PERIOD": "P400D"})
    assert longer.code == 0, longer


async def test_a_halt_gate_changed_behind_sagacity_halt_fails(
    env: dict[str, str | None], owner: psycopg.AsyncConnection[Any]
) -> None:
    # a halt in force that the gate does not hold refuses nothing: the owner emptied the gate
    ran = await doctor_while(
        owner,
        "INSERT INTO sagacity_halt (kind, scope, policy, reason, operator, halted_at)"
        " VALUES ('halt', '{}', 'keep', 'doctor', 'olivia', now())",
        "DELETE FROM sagacity_halt WHERE reason = 'doctor'",
        env,
    )
    assert ran.code == 1 and ran.ids() == {"halt_gate_mismatch"}, ran
    assert "refuses nothing" in ran.report()["findings"][0]["what"]


async def test_a_halt_gate_trigger_switched_off_fails(
    env: dict[str, str | None], owner: psycopg.AsyncConnection[Any]
) -> None:
    # the table's owner may disable the trigger that refuses halted INTENTs: then no halt holds
    ran = await doctor_while(
        owner,
        "ALTER TABLE side_effect_journal DISABLE TRIGGER sagacity_intent_gate",
        "ALTER TABLE side_effect_journal ENABLE TRIGGER sagacity_intent_gate",
        env,
    )
    assert ran.code == 1 and ran.ids() == {"halt_trigger_off"}, ran
    assert "a halt stops no call" in ran.report()["findings"][0]["what"]


async def test_what_it_cannot_check_is_a_clear_error(
    env: dict[str, str | None], endpoints: Endpoints
) -> None:
    unknown = await doctor(env, "--jsn")
    assert unknown.code == 2 and "No such option" in unknown.stderr
    unreachable = await doctor(
        {**env, "SAGACITY_DATABASE_URL": "postgresql://sagacity_app@127.0.0.1:1/none"}
    )
    assert unreachable.code == 3
    assert "cannot check the worker's database login and retention" in unreachable.stderr
    name = f"sagacity_unmigrated_{uuid4().hex[:8]}"
    try:
        empty = await ensure_database(endpoints.database_url, name)
        unmigrated = await doctor({**env, "SAGACITY_DATABASE_URL": empty})
    finally:
        await drop_database(endpoints.database_url, name)
    assert unmigrated.code == 3 and "run `sagacity db migrate` first" in unmigrated.stderr
    malformed = await doctor({**env, "SAGACITY_OUTAGE_WINDOW": "soon"})
    assert malformed.code == 2 and "SAGACITY_OUTAGE_WINDOW" in malformed.stderr
    not_a_url = await doctor({**env, "SAGACITY_DATABASE_URL": "no such thing"})
    assert not_a_url.code == 2 and "database URL" in not_a_url.stderr
    not_utf8 = await doctor({**env, "SAGACITY_DATABASE_URL": "postgresql://a@h/\udcff"})
    assert not_utf8.code == 2 and "database URL is not UTF-8" in not_utf8.stderr
    no_keyring = await doctor({**env, "SAGACITY_KEYRING": "/nonexistent/keyring.json"})
    assert no_keyring.code == 2 and "SAGACITY_KEYRING" in no_keyring.stderr
    for ran in (unreachable, unmigrated, malformed, not_a_url, not_utf8, no_keyring):
        assert ran.stdout == "" and ran.stderr.startswith("error: ")
