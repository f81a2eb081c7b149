"""Session-wide fixtures: one real dev stack, a fresh migrated database, one Temporal client.

Nothing is mocked, and the suite runs the way users do: the database is set up by its owner and
used through the append-only ``sagacity_app`` login, and workers sign checkpoints. With
``SAGACITY_DATABASE_URL`` unset the session runs the embedded Postgres
(``<repo>/.sagacity/postgres``); with ``TEMPORAL_ADDRESS`` unset it runs an in-memory Temporal dev
server on a free port. Set either to test against your own server instead.

Fixtures:

* ``codec_keys`` (session, autouse): a payload codec key file of this session's own, exported as
  ``SAGACITY_CODEC_KEYS_FILE`` the way ``sagacity dev`` exports its own, so every Temporal
  client, worker and ``sagacity`` process of the session encrypts its payloads.
* ``settings`` (session): :class:`~sagacity.settings.Settings` from the environment, with this
  session's anchors (a fresh signing key and checkpoint folder) as the checkpoint settings, the
  key pinned apart from them (``trust_file``, and ``checkpoint_public_key`` its public half) with
  a witness of the session's own that every database of the session's log is witnessed by, and
  a fresh redaction fingerprint key, as the dev stack makes them; its decision keys as
  ``sagacity dev`` makes them (a keyring trusting an approver key for ``alice`` and a service key
  that signs for anyone it authenticated).
* ``dev_stack`` (session): the running :class:`~sagacity.devstack.DevStack` (chaos helpers).
* ``endpoints`` (session): its :class:`~sagacity.devstack.Endpoints`.
* ``owner_database_url`` (session): a fresh database ``sagacity_test_<random>``, created and
  migrated by the server's owner login, ``sagacity_app`` granted; dropped at the end of the
  session. For tests that need the owner's rights: attacks, retention, migrations.
* ``database_url`` (session): the same database as ``sagacity_app`` (INSERT and SELECT only on the
  journal): what workers and most tests use.
* ``redactor`` (session): the settings' redactor, keyed with the session's fingerprint key.
* ``checkpoint_writer`` (session): signs into the session's checkpoint folder, for in-process
  workers.
* ``temporal_client`` (session): a client with the pydantic data converter and the session's codec.
* ``task_queue`` (function): a fresh ``tq-<uuid>`` per test, so tests never share workers.
* ``browser`` (session), ``page`` (function): Debian's headless Chromium through Playwright, and a
  page in a fresh context, screenshotted when its test fails (``tests/browser.py``).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from uuid import uuid4

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from temporalio.client import Client

from sagacity.cli._exit import exit_at_shutdown
from sagacity.devkeys import ensure_dev_approvers
from sagacity.devstack import DevStack, Endpoints
from sagacity.devwitness import DevWitness, log_key
from sagacity.evidence.checkpoints import CheckpointWriter
from sagacity.evidence.keys import (
    generate_fingerprint_key,
    generate_key,
    load_private_key,
    public_pem,
)
from sagacity.evidence.redaction import Redactor
from sagacity.evidence.trust import TrustedKey, TrustRoots, write_trust
from sagacity.settings import Settings, load_settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.store.migrate import provision
from sagacity.temporal.codec import data_converter, new_codec_key
from tests import browser as browser_fixtures

CODEC_ENV = ("SAGACITY_CODEC_KEYS", "SAGACITY_CODEC_KEYS_FILE")

#: the session's witness and the key its logs are signed with (set by ``settings``)
_session_witness: list[tuple[DevWitness, Ed25519PublicKey]] = []

# browser tests, shared by name (the hook notes failures for ``page``'s screenshot)
browser = browser_fixtures.browser
page = browser_fixtures.page
pytest_runtest_makereport = browser_fixtures.pytest_runtest_makereport


@pytest.fixture(scope="session", autouse=True)
def codec_keys(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    keys = tmp_path_factory.mktemp("codec") / "codec-keys"
    keys.write_text(new_codec_key("session") + "\n")
    saved = {name: os.environ.pop(name, None) for name in CODEC_ENV}
    os.environ["SAGACITY_CODEC_KEYS_FILE"] = str(keys)
    try:
        yield keys
    finally:
        for name, value in saved.items():
            os.environ.pop(name, None)
            if value is not None:
                os.environ[name] = value


@pytest.fixture(scope="session")
def settings(pytestconfig: pytest.Config, tmp_path_factory: pytest.TempPathFactory) -> Settings:
    loaded = load_settings()
    if not loaded.data_dir.is_absolute():
        # the default `.sagacity` means the repository's, wherever pytest was started from
        loaded = loaded.model_copy(update={"data_dir": pytestconfig.rootpath / loaded.data_dir})
    # anchors on, as the dev stack has them: a key and a checkpoint folder of this session's own,
    # and the key pinned apart from them (a trust file, and its public half) as verifiers take it
    anchors = tmp_path_factory.mktemp("anchors")
    key = anchors / "signing-key.pem"
    signer = generate_key(key).public_key()
    trust = tmp_path_factory.mktemp("trust")
    public = trust / "signing-key.pem.pub"
    public.write_bytes(public_pem(signer))
    trust_file = trust / "trust.json"
    # and a witness of its own, as the dev stack runs one: every tree head a worker of the
    # session publishes for a database of the session is cosigned (quorum 1)
    witness = DevWitness(tmp_path_factory.mktemp("witness"), port=0)
    witness.start()
    _session_witness.append((witness, signer))
    roots = TrustRoots((TrustedKey("sagacity-test", signer),), (witness.trusted,), 1)
    write_trust(trust_file, roots)
    fingerprint_key = anchors / "fingerprint-key"
    generate_fingerprint_key(fingerprint_key)
    approvers, _ = ensure_dev_approvers(anchors, user="alice")
    return loaded.model_copy(
        update={
            "redact_key": fingerprint_key,
            "signing_key": key,
            "checkpoint_public_key": public,
            "trust_file": trust_file,
            "checkpoint_dir": anchors / "checkpoints",
            "keyring": approvers.keyring,
            "approver_key": approvers.approver_key,
            "service_key": approvers.service_key,
        }
    )


@pytest.fixture(scope="session")
def redactor(settings: Settings) -> Redactor:
    """The session's redactor: the built-in rules, keyed as the dev stack keys them."""
    return settings.redactor()


@pytest.fixture(scope="session")
def checkpoint_writer(settings: Settings) -> CheckpointWriter:
    assert settings.checkpoint_dir is not None and settings.signing_key is not None
    return CheckpointWriter(settings.checkpoint_dir, load_private_key(settings.signing_key))


@pytest.fixture(scope="session")
async def dev_stack(settings: Settings) -> AsyncIterator[DevStack]:
    stack = DevStack(settings, temporal_db="memory")
    await stack.start()
    try:
        yield stack
    finally:
        await stack.stop()


def own_postgres(settings: Settings, data_dir: Path) -> DevStack:
    """An embedded Postgres of a test's own under ``data_dir`` (no Temporal), not yet started:
    for tests that stop and start it, which the session's would not survive (it is shared with
    every test process started from this checkout)."""
    own = Settings(
        database_url=None,
        temporal_address=None,
        data_dir=data_dir,
        temporal_namespace=settings.temporal_namespace,
    )
    return DevStack(own, temporal=False)


@pytest.fixture(scope="session")
def endpoints(dev_stack: DevStack) -> Endpoints:
    return dev_stack.endpoints


@contextlib.asynccontextmanager
async def scratch_database(endpoints: Endpoints, prefix: str) -> AsyncIterator[tuple[str, str]]:
    """A fresh database set up as a new user's is: (the owner's URL, the app role's URL)."""
    name = f"{prefix}_{uuid4().hex[:12]}"
    for witness, signer in _session_witness:
        witness.witness_log(log_key(name, signer))
    owner = await ensure_database(endpoints.database_url, name)
    try:
        yield owner, await provision(owner)
    finally:
        await drop_database(endpoints.database_url, name)


@pytest.fixture(scope="session")
async def _test_database(endpoints: Endpoints) -> AsyncIterator[tuple[str, str]]:
    async with scratch_database(endpoints, "sagacity_test") as urls:
        yield urls


@pytest.fixture(scope="session")
def owner_database_url(_test_database: tuple[str, str]) -> str:
    return _test_database[0]


@pytest.fixture(scope="session")
def database_url(_test_database: tuple[str, str]) -> str:
    return _test_database[1]


@pytest.fixture(scope="session")
async def temporal_client(endpoints: Endpoints, settings: Settings) -> Client:
    return await Client.connect(
        endpoints.temporal_address,
        namespace=endpoints.temporal_namespace,
        api_key=settings.temporal_api_key,
        tls=settings.temporal_tls or None,
        data_converter=data_converter(settings.payload_codec()),
    )


@pytest.fixture
def task_queue() -> str:
    return f"tq-{uuid4()}"


# --------------------------------------------------------------------------------------------------
# Exit status: see sagacity/cli/_exit.py. The Temporal SDK's Rust threads can abort the interpreter
# while it finalizes (temporalio/sdk-python#300), turning a passed run into exit 134. Once pytest
# has finished everything (fixtures torn down, summary printed, plugins unconfigured), leave with
# pytest's own exit status before finalization starts.

_session: pytest.Session | None = None


def pytest_sessionfinish(session: pytest.Session) -> None:
    global _session
    _session = session


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    session = _session
    if session is None:
        return
    exit_at_shutdown(lambda: int(session.exitstatus))
