"""The dev stack is real (a Postgres answering SQL, a Temporal server running a workflow), starts
nothing when endpoints are configured, survives its own chaos helpers, and exits with the right
status despite the Temporal SDK's teardown hazard."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator, Iterator
from datetime import timedelta
from pathlib import Path
from uuid import uuid4

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from pydantic import TypeAdapter
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from sagacity import devkeys
from sagacity.devstack import DevStack, Endpoints
from sagacity.devstack import temporal as devtemporal
from sagacity.devstack.postgres import EmbeddedPostgres
from sagacity.devstack.temporal import TemporalDevServer
from sagacity.evidence.decisions import Signer, Statement, load_keyring
from sagacity.evidence.keys import key_id, load_public_key
from sagacity.evidence.trust import load_trust
from sagacity.settings import Settings, load_settings
from sagacity.store.databases import drop_database, ensure_database, with_database
from sagacity.temporal import visibility
from sagacity.temporal.codec import parse_keys

REPO = Path(__file__).resolve().parents[1]


# -- Postgres -------------------------------------------------------------------------------------


async def test_postgres_answers_sql(endpoints: Endpoints, dev_stack: DevStack) -> None:
    async with await psycopg.AsyncConnection.connect(endpoints.database_url) as conn:
        row = await (await conn.execute("SELECT version()")).fetchone()
    assert row is not None and row[0].startswith("PostgreSQL ")
    if dev_stack.runs_postgres:
        # the wheel's server, on a unix socket (in its cluster folder), no TCP
        assert "?host=/" in endpoints.database_url


async def test_database_url_is_fresh_and_migrated(
    database_url: str, owner_database_url: str
) -> None:
    async with await psycopg.AsyncConnection.connect(owner_database_url) as conn:
        name = await (await conn.execute("SELECT current_database()")).fetchone()
        versions = await (
            await conn.execute("SELECT version FROM sagacity_schema_version ORDER BY version")
        ).fetchall()
    assert name is not None and name[0].startswith("sagacity_test_")
    assert versions, "migrate() applied nothing"
    # tests use the database as workers do: through the append-only login
    async with await psycopg.AsyncConnection.connect(database_url) as conn:
        row = await (await conn.execute("SELECT current_user, current_database()")).fetchone()
    assert row == ("sagacity_app", name[0])


async def test_ensure_database_is_idempotent(endpoints: Endpoints) -> None:
    name = f"sagacity_scratch_{uuid4().hex[:8]}"
    try:
        first = await ensure_database(endpoints.database_url, name)
        second = await ensure_database(endpoints.database_url, name)
        assert first == second
        async with await psycopg.AsyncConnection.connect(first) as conn:
            row = await (await conn.execute("SELECT current_database()")).fetchone()
        assert row == (name,)
    finally:
        await drop_database(endpoints.database_url, name)
    async with await psycopg.AsyncConnection.connect(endpoints.database_url) as conn:
        gone = await (
            await conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        ).fetchone()
    assert gone is None


def test_with_database_keeps_everything_but_the_name() -> None:
    assert (
        with_database("postgresql://postgres:@/sagacity?host=/x/postgres", "t1")
        == "postgresql://postgres:@/t1?host=/x/postgres"
    )
    assert (
        with_database("postgresql://u:p@127.0.0.1:5432/postgres?sslmode=disable", "t2")
        == "postgresql://u:p@127.0.0.1:5432/t2?sslmode=disable"
    )
    conninfo = with_database("host=127.0.0.1 port=5432 dbname=postgres user=u", "t3")
    assert psycopg.conninfo.conninfo_to_dict(conninfo) == {
        "host": "127.0.0.1",
        "port": "5432",
        "dbname": "t3",
        "user": "u",
    }


# -- Temporal -------------------------------------------------------------------------------------


@activity.defn
async def greet(name: str) -> str:
    return f"hello, {name}"


@workflow.defn(sandboxed=False)
class GreetWorkflow:
    @workflow.run
    async def run(self, name: str) -> str:
        return await workflow.execute_activity(
            greet, name, start_to_close_timeout=timedelta(seconds=10)
        )


@workflow.defn(sandboxed=False)
class WaitWorkflow:
    def __init__(self) -> None:
        self.released = False

    @workflow.signal
    def release(self) -> None:
        self.released = True

    @workflow.run
    async def run(self) -> str:
        await workflow.wait_condition(lambda: self.released)
        return "released"


@workflow.defn(sandboxed=False)
class ShowStateWorkflow:
    """Upserts a saga's state in its first workflow task: the soonest an upsert can follow the
    server's start."""

    @workflow.run
    async def run(self) -> None:
        workflow.upsert_search_attributes([visibility.STATE.value_set("running")])


async def test_dev_server_runs_a_workflow(temporal_client: Client, task_queue: str) -> None:
    async with Worker(
        temporal_client, task_queue=task_queue, workflows=[GreetWorkflow], activities=[greet]
    ):
        result = await temporal_client.execute_workflow(
            GreetWorkflow.run, "saga", id=f"wf-{uuid4()}", task_queue=task_queue
        )
    assert result == "hello, saga"


# -- configured endpoints: nothing is started ---------------------------------------------------


async def test_configured_endpoints_start_nothing(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SAGACITY_DATABASE_URL", "postgresql://someone@db.invalid:5432/journal")
    monkeypatch.setenv("TEMPORAL_ADDRESS", "temporal.invalid:7233")
    monkeypatch.setenv("SAGACITY_DATA_DIR", str(tmp_path / "data"))

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the dev stack tried to start a process")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    monkeypatch.setattr(EmbeddedPostgres, "start", refuse)

    stack = DevStack(load_settings())
    async with stack as endpoints:
        assert endpoints == Endpoints(
            database_url="postgresql://someone@db.invalid:5432/journal",
            temporal_address="temporal.invalid:7233",
            temporal_namespace="default",
        )
        assert not stack.runs_postgres and not stack.runs_temporal
    assert not (tmp_path / "data").exists()


# -- chaos helpers on a private stack ------------------------------------------------------------


@pytest.fixture
def private_data_dir(settings: Settings) -> Iterator[Path]:
    # under the repository's data folder, not /tmp: the wheel opens every parent of a cluster's
    # folder to its system user, which pytest's private temp root should not be
    path = settings.data_dir.expanduser().resolve() / "scratch" / uuid4().hex[:8]
    path.mkdir(parents=True)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _keeps_a_log(db_file: Path) -> bool:
    """Whether the SQLite file is in write-ahead-log mode, read from its header (its file format
    numbers, bytes 18 and 19: 2 for the log, 1 for a rollback journal). Not by opening it: the
    last connection to close folds a log a crash left back into the file, before the server's
    own recovery could be tested."""
    header = db_file.read_bytes()[:100]
    assert header[18:20] in (b"\x01\x01", b"\x02\x02"), header[18:20]
    return header[18:20] == b"\x02\x02"


async def test_the_temporal_state_file_keeps_a_write_ahead_log_and_what_was_acknowledged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state file from before the write-ahead log is converted with its workflows, and a start
    the server acknowledged is still there after the server is killed (-9)."""
    db_file = tmp_path / "temporal.db"

    async def server(log: str) -> tuple[TemporalDevServer, Client]:
        started = TemporalDevServer(
            db_file=db_file, namespace="default", port=None, log_path=tmp_path / log
        )
        started.spawn()
        await started.wait_ready(60)
        return started, await Client.connect(started.address)

    async def wait(client: Client) -> str:
        handle = await client.start_workflow(
            WaitWorkflow.run, id=f"wait-{uuid4()}", task_queue=f"tq-{uuid4()}"
        )
        return handle.id

    with monkeypatch.context() as before:  # a state file made by the release before
        before.setattr(devtemporal, "STATE_FILE_PRAGMAS", ())
        old, client = await server("old.log")
        kept = await wait(client)
        old.terminate()
        old.release()
    assert not _keeps_a_log(db_file)

    now, client = await server("new.log")
    acknowledged = await wait(client)
    now.terminate(kill=True)  # a crash: nothing flushed on the way out
    now.release()
    assert _keeps_a_log(db_file)
    # what the server acknowledged may be in the log alone: the restart recovers it from there
    assert db_file.with_name(db_file.name + "-wal").stat().st_size > 0

    again, client = await server("again.log")
    try:
        for workflow_id in (kept, acknowledged):
            described = await client.get_workflow_handle(workflow_id).describe()
            assert described.status == WorkflowExecutionStatus.RUNNING, workflow_id
    finally:
        again.terminate()
        again.release()


@pytest.fixture
async def private_stack(settings: Settings, private_data_dir: Path) -> AsyncIterator[DevStack]:
    # always embedded, whatever the session uses: these tests are about the embedded services
    own = Settings(
        database_url=None,
        temporal_address=None,
        data_dir=private_data_dir,
        temporal_namespace=settings.temporal_namespace,
    )
    stack = DevStack(own, temporal_db=private_data_dir / "temporal.db")
    await stack.start()
    try:
        yield stack
    finally:
        await stack.stop()


async def test_restarts_keep_state_port_and_url(private_stack: DevStack) -> None:
    endpoints = private_stack.endpoints
    async with await psycopg.AsyncConnection.connect(endpoints.database_url) as conn:
        await conn.execute("CREATE TABLE kept (v int); INSERT INTO kept VALUES (42)")
        await conn.commit()
    client = await Client.connect(endpoints.temporal_address)
    handle = await client.start_workflow(
        WaitWorkflow.run, id=f"wait-{uuid4()}", task_queue=f"tq-{uuid4()}"
    )

    await private_stack.restart_postgres(mode="immediate")  # like a crash: no checkpoint
    await private_stack.restart_temporal(kill=True)
    assert private_stack.endpoints == endpoints

    async with await psycopg.AsyncConnection.connect(endpoints.database_url) as conn:
        assert await (await conn.execute("SELECT v FROM kept")).fetchall() == [(42,)]
    client = await Client.connect(endpoints.temporal_address)
    described = await client.get_workflow_handle(handle.id).describe()
    assert described.status == WorkflowExecutionStatus.RUNNING
    await client.get_workflow_handle(handle.id).terminate()


async def test_a_temporal_state_file_from_before_the_search_attributes_is_given_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The dev server registers ``--search-attribute``s only as it creates its state file."""
    db_file = tmp_path / "temporal.db"

    async def server(log: str) -> TemporalDevServer:
        started = TemporalDevServer(
            db_file=db_file, namespace="default", port=None, log_path=tmp_path / log
        )
        started.spawn()
        await started.wait_ready(60)
        return started

    async def nothing(client: Client) -> list[str]:
        return []

    with monkeypatch.context() as before:  # a state file made before Sagacity had them
        before.setattr(visibility, "dev_server_flags", list)
        before.setattr(visibility, "missing", nothing)
        old = await server("old.log")
        client = await Client.connect(old.address)
        assert await visibility.why_hidden(client) is not None
        old.terminate()
        old.release()
    now = await server("new.log")
    try:
        client = await Client.connect(now.address)
        assert await visibility.why_hidden(client) is None
        # and every part of the server takes them at once: the server caches search attributes
        # (devtemporal.DYNAMIC_CONFIG), so without a restart after registering them the first
        # upsert's workflow task fails until the cache refreshes
        async with Worker(client, task_queue="show-state", workflows=[ShowStateWorkflow]):
            handle = await client.start_workflow(
                ShowStateWorkflow.run, id=f"show-{uuid4().hex[:8]}", task_queue="show-state"
            )
            await handle.result()
        events = [e.event_type async for e in handle.fetch_history_events()]
        assert EventType.EVENT_TYPE_WORKFLOW_TASK_FAILED not in events
        assert EventType.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES in events
    finally:
        now.terminate()
        now.release()


# -- `sagacity dev` ------------------------------------------------------------------------------


def _sagacity_exe() -> str:
    exe = Path(sys.executable).parent / "sagacity"
    if not exe.exists():
        pytest.fail(f"{exe} missing: install the project (`make test` does)")
    return str(exe)


def test_dev_command_prints_exports_and_stops_on_sigterm(private_data_dir: Path) -> None:
    # a fresh clone's environment: no codec keys of the test session's
    env = {k: v for k, v in os.environ.items() if not k.startswith("SAGACITY_CODEC_KEYS")}
    env["SAGACITY_DATA_DIR"] = str(private_data_dir)
    proc = subprocess.Popen(
        [_sagacity_exe(), "dev", "--port", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stdout is not None
        printed = []
        for line in proc.stdout:
            printed.append(line)
            if "Ctrl-C" in line:
                break
        exports = dict(re.findall(r"export (\w+)=(\S+)", "".join(printed)))
        assert "TEMPORAL_ADDRESS" in exports, "".join(printed)
        # the same lines in a file to source, the stack's own (it names its keys)
        env_file = private_data_dir / "dev.env"
        assert f"`source {env_file}`" in "".join(printed)
        assert dict(re.findall(r"export (\w+)=(\S+)", env_file.read_text())) == exports
        assert env_file.stat().st_mode & 0o777 == 0o600
        url = exports["SAGACITY_DATABASE_URL"].strip("'")
        with psycopg.connect(url) as conn:
            # what other terminals get is the append-only login, on a migrated journal
            assert conn.execute("SELECT current_user").fetchone() == ("sagacity_app",)
            assert conn.execute("SELECT count(*) FROM side_effect_journal").fetchone() == (0,)
        # anchors on: a key (owner-only) and a checkpoint folder, outside the Postgres cluster
        key = Path(exports["SAGACITY_SIGNING_KEY"].strip("'"))
        assert key.stat().st_mode & 0o777 == 0o600
        assert key.parent == private_data_dir / "anchors"
        assert Path(exports["SAGACITY_CHECKPOINT_DIR"].strip("'")).is_dir()
        # verifiers pin that key in a trust file apart from the anchors; no key beside them
        trust = Path(exports["SAGACITY_TRUST_FILE"].strip("'"))
        assert trust.parent == private_data_dir / "trust"
        signer = key_id(load_public_key(key))
        assert list(load_trust(trust).signer_keys()) == [signer]
        assert "SAGACITY_CHECKPOINT_PUBLIC_KEY" not in exports
        # and a key to fingerprint redacted fields with, the workers' secret
        fingerprint_key = Path(exports["SAGACITY_REDACT_KEY"].strip("'"))
        assert fingerprint_key.stat().st_mode & 0o777 == 0o600
        assert load_settings(redact_key=fingerprint_key).redactor().key is not None
        # the payload codec on: one key, owner-only, beside the anchors
        codec_keys = Path(exports["SAGACITY_CODEC_KEYS_FILE"].strip("'"))
        assert codec_keys == private_data_dir / "codec-keys"
        assert codec_keys.stat().st_mode & 0o777 == 0o600
        assert len(parse_keys(codec_keys.read_text())) == 1
        if "SAGACITY_DATABASE_URL" not in os.environ:
            # no exports pasted: verify finds the running embedded database and its anchors
            found = subprocess.run(
                [_sagacity_exe(), "verify", "--all"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert found.returncode == 0, found.stdout + found.stderr
            assert f"checkpoints {private_data_dir / 'anchors'}" in found.stderr
            # and so does `saga journal`: a saga with no rows, not a missing setting
            journal = subprocess.run(
                [_sagacity_exe(), "saga", "journal", "no-such-saga"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert journal.returncode == 1, journal.stdout + journal.stderr
            assert "SAGACITY_DATABASE_URL" not in journal.stderr, journal.stderr
            # a command that needs Temporal says to source the file; sourced, it runs
            listed = [_sagacity_exe(), "approvals", "list", "--json"]
            bare = subprocess.run(listed, env=env, capture_output=True, text=True, timeout=60)
            assert bare.returncode == 2 and f"source {env_file}" in bare.stderr, bare.stderr
            sourced = subprocess.run(
                ["bash", "-c", f"source {shlex.quote(str(env_file))} && {shlex.join(listed)}"],
                env=env,
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert sourced.returncode == 0, sourced.stderr
            assert json.loads(sourced.stdout)["total"] == 0
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert (private_data_dir / "temporal.db").exists()
    assert not env_file.exists()  # gone with the stack


# -- exit status ---------------------------------------------------------------------------------


def _python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env={k: v for k, v in os.environ.items() if k != "SAGACITY_SOFT_EXIT"},
    )


def test_exit_at_shutdown_keeps_the_status() -> None:
    done = _python(
        """
        import sys
        from sagacity.cli._exit import exit_at_shutdown
        exit_at_shutdown(lambda: 3)
        print("work done")
        """
    )
    assert (done.returncode, done.stdout) == (3, "work done\n")


def test_exit_at_shutdown_reports_an_uncaught_exception_as_failure() -> None:
    done = _python(
        """
        from sagacity.cli._exit import exit_at_shutdown
        exit_at_shutdown(lambda: 0)
        raise RuntimeError("late failure")
        """
    )
    assert done.returncode == 1
    assert "late failure" in done.stderr


def test_hard_exit_command_after_temporal_use() -> None:
    done = _python(
        """
        import sys
        import typer
        from temporalio.runtime import Runtime
        from sagacity.cli._exit import hard_exit

        @hard_exit
        def cmd(code: int = 0) -> None:
            Runtime.default()  # the SDK's Rust threads now exist
            print("ok")
            if code:
                raise typer.Exit(code)

        sys.argv[1:] = ["--code", "4"]
        typer.run(cmd)
        """
    )
    assert (done.returncode, done.stdout) == (4, "ok\n"), done.stderr


# -- README ---------------------------------------------------------------------------------------


def _shown(value: object) -> str:
    """A default as the README's table shows it."""
    if value is None:
        return "unset"
    return str(TypeAdapter(type(value)).dump_python(value, mode="json")).lower()


def test_readme_documents_every_setting_with_its_default() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| `(SAGACITY_\w+)`[^|]*\| ([^|]+) \|", readme, flags=re.MULTILINE)
    documented = {name: cell.split("`")[1] if "`" in cell else cell for name, cell in rows}
    expected = {
        f"SAGACITY_{name.upper()}": _shown(field.default)
        for name, field in Settings.model_fields.items()
    }
    assert {k: v.lower() for k, v in documented.items()} == expected


# -- anchors ----------------------------------------------------------------------------------


def test_dev_decision_keys_sign_for_the_local_user_and_are_the_default_settings(
    tmp_path: Path,
) -> None:
    approvers, user = devkeys.ensure_dev_approvers(tmp_path, user="renee")
    keyring = load_keyring(approvers.keyring)
    mine, service = Signer.open(approvers.approver_key), Signer.open(approvers.service_key)
    assert approvers.approver_key.stat().st_mode & 0o777 == 0o600
    statement = Statement("s", 5, "0" * 64, "approve", user)
    assert keyring.refusal(statement, mine.sign(statement)) is None
    as_someone_else = Statement("s", 5, "0" * 64, "approve", "mallory")
    assert "may not sign for 'mallory'" in str(
        keyring.refusal(as_someone_else, mine.sign(as_someone_else))
    )
    # the service key signs for whoever the API authenticated
    assert keyring.refusal(as_someone_else, service.sign(as_someone_else)) is None
    before = approvers.keyring.read_bytes()
    assert devkeys.ensure_dev_approvers(tmp_path, user="renee") == (approvers, user)
    assert approvers.keyring.read_bytes() == before  # kept, not made again
    dev = Settings(data_dir=tmp_path, database_url=None)
    assert (dev.keyring, dev.approver_key, dev.service_key) == (
        approvers.keyring,
        approvers.approver_key,
        approvers.service_key,
    )
    given = Settings(data_dir=tmp_path, database_url="postgresql://elsewhere/db")
    assert given.keyring is None


def test_dev_console_token_is_the_local_users_made_once_and_private(tmp_path: Path) -> None:
    approvers, _ = devkeys.ensure_dev_approvers(tmp_path, user="renee")
    token, _, who = approvers.console_token.read_text().strip().partition("=")
    assert who == "renee" and len(token) >= 32
    assert approvers.console_token.stat().st_mode & 0o777 == 0o600
    devkeys.ensure_dev_approvers(tmp_path, user="renee")
    assert approvers.console_token.read_text().startswith(token)  # kept, not made again
    assert Settings(data_dir=tmp_path, database_url=None, approval_tokens=None).approval_tokens == {
        token: "renee"
    }
    elsewhere = Settings(
        data_dir=tmp_path, database_url="postgresql://elsewhere/db", approval_tokens=None
    )
    assert elsewhere.approval_tokens is None


def test_dev_codec_keys_are_created_once_and_are_the_dev_stacks_default(tmp_path: Path) -> None:
    path = devkeys.ensure_dev_codec_keys(tmp_path)
    first = path.read_text()
    assert devkeys.ensure_dev_codec_keys(tmp_path) == path and path.read_text() == first
    assert path.stat().st_mode & 0o777 == 0o600
    (key,) = parse_keys(first)
    dev = Settings(data_dir=tmp_path, database_url=None, codec_keys_file=None).payload_codec()
    assert dev is not None and dev.key_ids == (key.id,)
    elsewhere = Settings(
        data_dir=tmp_path, database_url="postgresql://elsewhere/db", codec_keys_file=None
    )
    assert elsewhere.payload_codec() is None


def test_dev_anchors_are_created_once_and_kept(tmp_path: Path) -> None:
    anchors, fingerprint, created = devkeys.ensure_dev_anchors(tmp_path)
    assert created and anchors.folder == tmp_path / "anchors"
    assert anchors.signing_key.stat().st_mode & 0o777 == 0o600
    assert key_id(load_public_key(anchors.public_key)) == fingerprint
    again = devkeys.ensure_dev_anchors(tmp_path)
    assert again == (anchors, fingerprint, False)
    # on the dev stack (no database configured) they are the default anchor settings
    dev = Settings(data_dir=tmp_path, database_url=None)
    assert (dev.signing_key, dev.checkpoint_dir) == (anchors.signing_key, anchors.checkpoint_dir)
    given = Settings(data_dir=tmp_path, database_url="postgresql://elsewhere/db")
    assert (given.signing_key, given.checkpoint_dir) == (None, None)


def test_the_dev_trust_file_pins_the_signing_key_apart_from_the_anchors(tmp_path: Path) -> None:
    anchors, fingerprint, _ = devkeys.ensure_dev_anchors(tmp_path)
    signer = load_public_key(anchors.public_key)
    path, problem = devkeys.ensure_dev_trust(tmp_path, signer)
    assert problem is None and path == tmp_path / "trust" / "trust.json"
    assert anchors.folder not in path.parents and path.stat().st_mode & 0o777 == 0o444
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert list(load_trust(path).signer_keys()) == [fingerprint]
    # the default trust file on the dev stack, and no other key is taken beside it
    assert Settings(data_dir=tmp_path, database_url=None).trust_file == path
    assert Settings(data_dir=tmp_path, database_url="postgresql://x/db").trust_file is None
    # a key replaced since is not pinned silently: the trust file keeps the first and says so
    other = Ed25519PrivateKey.generate().public_key()
    again, problem = devkeys.ensure_dev_trust(tmp_path, other)
    assert again == path and list(load_trust(path).signer_keys()) == [fingerprint]
    assert problem is not None and f"not the signing key {key_id(other)}" in problem


def test_the_dev_fingerprint_key_is_created_once_and_is_the_default(tmp_path: Path) -> None:
    assert Settings(data_dir=tmp_path, database_url=None).redact_key is None
    path = devkeys.ensure_dev_fingerprint_key(tmp_path)
    made = path.read_bytes()
    assert path.stat().st_mode & 0o777 == 0o600
    assert devkeys.ensure_dev_fingerprint_key(tmp_path) == path
    assert path.read_bytes() == made  # kept: fingerprints stay comparable across restarts
    assert Settings(data_dir=tmp_path, database_url=None).redactor().key is not None
    elsewhere = Settings(data_dir=tmp_path, database_url="postgresql://elsewhere/db")
    assert elsewhere.redact_key is None
