"""Issue 12's acceptance tamper suite, in the configuration a new user gets.

``sagacity dev``'s own set-up (``DevStack.prepare``) makes the journal: a fresh database
migrated by its owner, the ``sagacity_app`` login, a signing key and a checkpoint folder. The
``export`` lines ``sagacity dev`` prints for it are the whole environment of every command run
here, and nothing is added to what the README has users type. A real worker (the code
``sagacity worker --app workflows.order.app`` runs, as ``sagacity_app``, signing checkpoints) runs
real Order sagas on the session's Temporal server; ``sagacity log integrate`` logs them.

Then each attack. The tables' owner uses plain SQL, as in ``psql``, and computes hashes from
docs/hash-rules.md alone (the attacker has the rules, not Sagacity); whoever holds a bundle edits
its files. Each class must fail what a user runs (``sagacity verify SAGA``, ``sagacity verify
--all``, ``sagacity log verify``, ``sagacity verify --bundle DIR --public-key KEY``) with a
non-zero exit, naming the saga, the seq (where the class has one) and the anchor that disagrees.
An untouched journal verifies, exit 0, in the same configuration.

The table "What is detected, by what, in the default configuration" in docs/evidence.md lists
these classes; keep the two in step.
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import os
import re
import shlex
import shutil
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from psycopg.rows import dict_row
from temporalio.client import Client
from typer.testing import CliRunner

from sagacity.cli.dev import _exports
from sagacity.cli.main import app as main_app
from sagacity.devkeys import DevSetup
from sagacity.devstack import DevStack, Endpoints
from sagacity.evidence.checkpoints import sign
from sagacity.evidence.keys import key_id, public_pem
from sagacity.settings import Settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.temporal.models import SagaResult, SagaSpec, SagaState
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import running_worker
from workflows.order import shop as order_shop
from workflows.order.shop import Shop
from workflows.order.workflows import order_steps

#: the sagas the worker runs, by the attack each is kept for ("control" is never touched)
ROLES = (
    "control",
    "edit",
    "recomputed",
    "truncated",
    "deleted",
    "reordered",
    "appended",
    "bundle",
    "rolledback",
    "erased",
)
#: reserve stock, create the order: two reversible calls, no approval gate, four rows
TWO_STEPS = SagaSpec(steps=order_steps(product_id="p-2", quantity=1).steps[:2])


# --------------------------------------------------------------------------------------------------
# The user's shell: the `sagacity` command with exactly the exports `sagacity dev` prints


@dataclass(frozen=True)
class Run:
    args: tuple[str, ...]
    code: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return (
            f"$ sagacity {shlex.join(self.args)}  -> exit {self.code}\n{self.stdout}{self.stderr}"
        )

    def failed_block(self, saga_id: str) -> list[str]:
        """The lines ``verify`` prints under ``FAILED  <saga_id>`` (its anchors' findings)."""
        lines = self.stdout.splitlines()
        assert f"FAILED  {saga_id}" in lines, f"{saga_id} is not reported FAILED:\n{self}"
        block = []
        for line in lines[lines.index(f"FAILED  {saga_id}") + 1 :]:
            if not line.startswith("  "):
                break
            block.append(line.strip())
        return block

    def log_findings(self, saga_id: str) -> list[str]:
        """``log verify``'s lines about ``saga_id`` (FAILED, or WARNING: pending)."""
        return [line for line in self.stdout.splitlines() if f" saga {saga_id!r} seq " in line]


def dev_exports(endpoints: Endpoints, setup: DevSetup) -> dict[str, str]:
    """The ``export NAME=value`` lines ``sagacity dev`` prints for ``setup``, as a mapping."""
    env = {}
    for line in _exports(endpoints, setup):
        name, _, value = line.removeprefix("export ").partition("=")
        (env[name],) = shlex.split(value)
    return env


class Shell:
    """A terminal where the user pasted the exports: nothing else of Sagacity's is set."""

    def __init__(self, exports: dict[str, str]) -> None:
        self.exports = exports
        self._runner = CliRunner()
        self._one_at_a_time = asyncio.Lock()

    def env(self, **changes: str | None) -> dict[str, str | None]:
        unset: dict[str, str | None] = {
            name: None for name in os.environ if name.startswith(("SAGACITY_", "TEMPORAL_"))
        }
        # the same typer app in this process; SAGACITY_SOFT_EXIT lets the runner catch the exit
        return {**unset, **self.exports, "SAGACITY_SOFT_EXIT": "1", **changes}

    async def __call__(self, *args: str, **env: str | None) -> Run:
        async with self._one_at_a_time:  # the runner swaps the process's stdio and environment
            result = await asyncio.to_thread(
                self._runner.invoke, main_app, list(args), env=self.env(**env)
            )
        assert result.exception is None or isinstance(result.exception, SystemExit), (
            f"sagacity {shlex.join(args)} raised {result.exception!r}\n{result.stderr}"
        )
        return Run(tuple(args), result.exit_code, result.stdout, result.stderr)


# --------------------------------------------------------------------------------------------------
# The attacker: docs/hash-rules.md's own snippet, and SQL as the tables' owner


GENESIS = "0" * 64
FIELDS = ("saga_id", "seq", "tool_name", "phase", "input", "payload", "timestamp")
TIMESTAMP = "%Y-%m-%dT%H:%M:%S.%fZ"
SELECT_SAGA = """
SELECT saga_id, seq, tool_name, phase, input, payload,
       to_char(timestamp, 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') AS timestamp, hash
FROM side_effect_journal
WHERE saga_id = %s
ORDER BY seq
"""
INSERT_ROW = (
    "INSERT INTO side_effect_journal (saga_id, seq, tool_name, phase, input, payload, timestamp,"
    " hash) VALUES (%(saga_id)s, %(seq)s, %(tool_name)s, %(phase)s, %(input)s, %(payload)s,"
    " %(timestamp)s::timestamp, %(hash)s)"
)


def netstring(text: str) -> bytes:
    raw = text.encode("utf-8")
    return str(len(raw)).encode("ascii") + b":" + raw + b","


def row_hash(prev_hash: str, row: dict[str, Any]) -> str:
    fields = [prev_hash] + [str(row[name]) for name in FIELDS]
    message = b"sagacity-journal-v1\n" + b"".join(netstring(f) for f in fields)
    return hashlib.sha256(message).hexdigest()


def rechain(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``rows`` renumbered from seq 1 in their order, every hash recomputed by the rules."""
    prev, out = GENESIS, []
    for seq, row in enumerate(rows, start=1):
        fresh = {**row, "seq": seq}
        fresh["hash"] = prev = row_hash(prev, fresh)
        out.append(fresh)
    return out


def days_ago(days: float) -> str:
    return (datetime.now(UTC) - timedelta(days=days)).strftime(TIMESTAMP)


@dataclass
class Owner:
    """The tables' owner at a ``psql`` prompt."""

    url: str

    async def rows(self, saga_id: str) -> list[dict[str, Any]]:
        async with await psycopg.AsyncConnection.connect(self.url, row_factory=dict_row) as conn:
            return await (await conn.execute(SELECT_SAGA, (saga_id,))).fetchall()

    async def sql(self, statement: str, *params: object) -> None:
        async with await psycopg.AsyncConnection.connect(self.url, autocommit=True) as conn:
            await conn.execute(statement, params)

    async def replace(self, saga_id: str, rows: list[dict[str, Any]]) -> None:
        """The saga's rows replaced by ``rows``, in one transaction."""
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            await conn.execute("DELETE FROM side_effect_journal WHERE saga_id = %s", (saga_id,))
            for row in rows:
                await conn.execute(INSERT_ROW, row)
            await conn.commit()

    async def rewrite(
        self, saga_id: str, change: Callable[[list[dict[str, Any]]], list[dict[str, Any]]]
    ) -> None:
        await self.replace(saga_id, rechain(change(await self.rows(saga_id))))


# --------------------------------------------------------------------------------------------------
# The new user's set-up, their sagas, and what their commands said before any attack


@dataclass
class NewUser:
    shell: Shell
    owner: Owner
    sagas: dict[str, str]  # role -> saga id
    trust_file: str  # $SAGACITY_TRUST_FILE
    checkpoint_dir: Path  # $SAGACITY_CHECKPOINT_DIR
    key_id: str
    bundle: Path  # the "bundle" saga, exported as the README shows
    #: the commands run on the untouched journal, in order
    control: dict[str, Run]


async def run_sagas(settings: Settings, client: Client, roles: tuple[str, ...]) -> dict[str, str]:
    """Each role's saga, run to its end by a worker the way ``sagacity worker`` runs one."""
    run = uuid.uuid4().hex[:8]
    sagas = {role: f"new-user-{role}-{run}" for role in roles}
    try:
        before: Shop | None = order_shop.current()
    except RuntimeError:  # none yet
        before = None
    try:
        async with running_worker(settings, ["workflows.order.app"], graceful_s=1):
            results = await asyncio.gather(
                *(
                    client.execute_workflow(
                        STEPS_WORKFLOW,
                        TWO_STEPS,
                        id=saga_id,
                        task_queue=settings.task_queue,
                        result_type=SagaResult,
                    )
                    for saga_id in sagas.values()
                )
            )
            # the worker runs the transparency log's sequencer beside its tool calls
            await logged_by_the_worker(settings, 4 * len(roles))
    finally:
        if before is not None:  # the order app's lifespan made its own shop the current one
            order_shop.use(before)
    for result in results:
        assert result.status is SagaState.COMPLETED and result.head.seq == 4, result
    return sagas


async def logged_by_the_worker(settings: Settings, rows: int) -> None:
    """Wait until the worker's own sequencer has published a tree head of ``rows`` leaves."""
    assert settings.checkpoint_dir is not None
    note = settings.checkpoint_dir / "tlog" / "checkpoint"
    for _ in range(150):
        if note.is_file() and int(note.read_text().splitlines()[1]) >= rows:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the worker published no tree head of {rows} leaves in 30 s")


def fresh_clone(settings: Settings, owner_url: str, data_dir: Path, **more: object) -> Settings:
    """The session's settings as a fresh clone has them: the database's owner, and nothing of the
    anchors, trust file or data folder (``sagacity dev`` makes its own in ``data_dir``)."""
    unset = ("database_url", "signing_key", "checkpoint_public_key", "trust_file", "checkpoint_dir")
    return settings.model_copy(
        update={
            "owner_database_url": owner_url,
            **dict.fromkeys(unset),
            "data_dir": data_dir / ".sagacity",
            **more,
        }
    )


@pytest.fixture(scope="module")
async def new_user(
    endpoints: Endpoints,
    settings: Settings,
    temporal_client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[NewUser]:
    name = f"sagacity_newuser_{uuid.uuid4().hex[:10]}"
    owner_url = await ensure_database(endpoints.database_url, name)
    try:
        fresh = fresh_clone(settings, owner_url, tmp_path_factory.mktemp("new-user"))
        # what `sagacity dev` does on a fresh clone: migrate as the owner, hand out
        # sagacity_app, create the signing key and the checkpoint folder
        setup = await DevStack(fresh, postgres=False, temporal=False).prepare()
        assert setup.key_created
        exports = dev_exports(endpoints, setup)
        assert set(exports) >= {
            "SAGACITY_DATABASE_URL",
            "SAGACITY_SIGNING_KEY",
            "SAGACITY_TRUST_FILE",
            "SAGACITY_CHECKPOINT_DIR",
        }
        # the key is pinned apart from the data, never handed over beside it
        assert "SAGACITY_CHECKPOINT_PUBLIC_KEY" not in exports
        worker_settings = fresh.model_copy(
            update={
                **setup.settings(),
                "temporal_address": endpoints.temporal_address,
                "temporal_namespace": endpoints.temporal_namespace,
                "task_queue": f"tq-{uuid.uuid4()}",
                # the default is 10 s; the log's schedule, not what it finds, is shortened
                "log_interval": timedelta(seconds=0.5),
            }
        )
        sagas = await run_sagas(worker_settings, temporal_client, ROLES)

        shell = Shell(exports)
        trust_file = exports["SAGACITY_TRUST_FILE"]
        bundle = tmp_path_factory.mktemp("bundle") / "evidence"
        control = {
            "log integrate": await shell("log", "integrate"),
            "verify --all": await shell("verify", "--all"),
            "verify": await shell("verify", *sagas.values()),
            "log verify": await shell("log", "verify"),
            "export": await shell("export", sagas["bundle"], "--out", str(bundle)),
            "verify --bundle": await shell(
                "verify", "--bundle", str(bundle), "--trust", trust_file
            ),
        }
        yield NewUser(
            shell, Owner(owner_url), sagas, trust_file, setup.checkpoint_dir, setup.key_id,
            bundle, control,
        )  # fmt: skip
    finally:
        await drop_database(endpoints.database_url, name)


def test_an_untouched_journal_verifies_with_exit_0(new_user: NewUser) -> None:
    runs = new_user.control
    for run in runs.values():
        assert run.code == 0, run
    # the worker's sequencer logged every row already
    assert runs["log integrate"].stdout == f"nothing new; the log holds {4 * len(ROLES)} leaves\n"
    assert runs["verify --all"].stdout.endswith(
        f"{len(ROLES)} sagas, {4 * len(ROLES)} rows: all verified\n"
    ), runs["verify --all"]
    for saga_id in new_user.sagas.values():
        assert f"ok      {saga_id}  4 rows  [checkpoint agrees at seq 4 (" in runs["verify"].stdout
    assert runs["log verify"].stdout.endswith("0 rows pending: all verified\n"), runs["log verify"]
    # the dev witness cosigned the worker's tree heads, as the trust file's quorum requires
    note = (new_user.checkpoint_dir / "tlog" / "checkpoint").read_text()
    assert "\n\u2014 sagacity.local/witness " in note, note
    assert "UNANCHORED" not in runs["export"].stderr, runs["export"]
    assert "VERIFIED: every file, chain and signed checkpoint" in runs["verify --bundle"].stdout


# --------------------------------------------------------------------------------------------------
# The journal's classes: the owner's SQL, then what `verify` and `log verify` say


async def payload_edit(owner: Owner, saga_id: str) -> None:
    """Row 2's result rewritten, and every later hash recomputed from it."""

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[1]["payload"] = '{"reservation_id": "r-mallory"}'
        return rows

    await owner.rewrite(saga_id, change)


async def recomputed_chain(owner: Owner, saga_id: str) -> None:
    """Every row backdated a day, the whole chain recomputed from seq 1."""

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for row in rows:
            when = datetime.strptime(row["timestamp"], TIMESTAMP) - timedelta(days=1)
            row["timestamp"] = when.strftime(TIMESTAMP)
        return rows

    await owner.rewrite(saga_id, change)


async def truncated_tail(owner: Owner, saga_id: str) -> None:
    await owner.sql("DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 2", saga_id)


async def deleted_saga(owner: Owner, saga_id: str) -> None:
    await owner.sql("DELETE FROM side_effect_journal WHERE saga_id = %s", saga_id)


async def forged_saga(owner: Owner, saga_id: str) -> None:
    """A saga no worker wrote, chained by the rules, dated yesterday (before the tree head)."""
    args = '{"product_id": "p-2", "quantity": 40}'
    rows = rechain(
        [
            {
                "saga_id": saga_id,
                "tool_name": "reserve_inventory",
                "phase": phase,
                "input": args,
                "payload": payload,
                "timestamp": days_ago(1 - n / 1e6),
            }
            for n, (phase, payload) in enumerate(
                (("INTENT", ""), ("EXECUTED", '{"reservation_id": "r-forged"}'))
            )
        ]
    )
    await owner.replace(saga_id, rows)


async def reordered_rows(owner: Owner, saga_id: str) -> None:
    """Rows 2 and 3 swap seqs (each keeps its content), every hash from 2 on recomputed."""

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[1], rows[2] = rows[2], rows[1]
        return rows

    await owner.rewrite(saga_id, change)


async def appended_after_end(owner: Owner, saga_id: str) -> None:
    """A row 5 after the completed saga's last row, chained to it: 'the order was undone'."""
    rows = await owner.rows(saga_id)
    last = rows[-1]
    extra = {**rows[2], "seq": 5, "phase": "COMPENSATED", "payload": "{}", "timestamp": days_ago(0)}
    extra["hash"] = row_hash(last["hash"], extra)
    await owner.replace(saga_id, [*rows, extra])


Attack = Callable[[Owner, str], Awaitable[None]]


@dataclass(frozen=True)
class JournalCase:
    attack: Attack
    role: str  # the saga attacked (a new id for a forged saga)
    #: (seq, words) of the line `sagacity verify` prints for the anchor that disagrees
    verify: tuple[int | None, str]
    #: (seq, words) of `sagacity log verify`'s first line about the saga: FAILED when the tree
    #: head catches the class, else what it says instead
    log: tuple[int, str]


REWRITTEN = r"row {seq} is hashed \w+… in the journal but \w+… by the checkpoint \(signed [^)]+\): the journal was rewritten"
REMOVED = r"the checkpoint \((?:signed|sealed) [^)]+\) has row {seq} hashed \w+…, but the journal has no row {seq}"
LOGGED = r"leaf \d+ \(logged in tree head \d+\)"
ALTERED = rf"FAILED  saga '{{saga}}' seq {{seq}}: row {{seq}} is hashed \w+… in the journal but \w+… in {LOGGED}: rewritten after it was logged"
DELETED = rf"FAILED  saga '{{saga}}' seq {{seq}}: in {LOGGED} but gone from the journal: deleted"
UNATTESTED = (
    r"unattested: no signed checkpoint covers it: forged, or written behind Sagacity's back"
)

JOURNAL_CASES = {
    "payload edit, later hashes recomputed": JournalCase(
        payload_edit,
        "edit",
        # a call's INTENT is covered by its outcome's checkpoint: none signed row 1 alone
        (2, rf"disagrees: {REWRITTEN}$"),
        (2, ALTERED),
    ),
    "whole chain recomputed": JournalCase(
        recomputed_chain, "recomputed", (2, rf"disagrees: {REWRITTEN}$"), (1, ALTERED)
    ),
    "truncated tail": JournalCase(
        truncated_tail,
        "truncated",
        (
            4,  # the last row's checkpoint is its seal
            rf"disagrees: {REMOVED} \(it ends at seq 2\): rows were removed; it still agrees at seq 2$",
        ),
        (3, DELETED),
    ),
    "deleted saga": JournalCase(
        deleted_saga,
        "deleted",
        (2, rf"disagrees: {REMOVED} \(it has no rows of this saga\): the saga was deleted$"),
        (1, DELETED),
    ),
    "forged saga": JournalCase(
        forged_saga,
        "forged",
        (
            None,
            r"missing: no signed checkpoint of this saga: its rows were not written by a worker that checkpoints",
        ),
        (
            1,
            rf"FAILED  saga '{{saga}}' seq {{seq}}: {UNATTESTED} \(written \S+\)",
        ),
    ),
    "reordered rows": JournalCase(
        reordered_rows,
        "reordered",
        # a call's INTENT is covered by its outcome's checkpoint: none signed row 1 alone
        (2, rf"disagrees: {REWRITTEN}$"),
        (2, ALTERED),
    ),
    "rows appended after the saga ended": JournalCase(
        appended_after_end,
        "appended",
        (
            5,
            r"disagrees: row 5 was written after the saga ended: sealed at seq 4 \(completed, signed [^)]+\)$",
        ),
        # a row the log has not seen, dated now: pending, and taken in at the log's next pass
        (5, r"WARNING saga '{saga}' seq {seq}: not in the log yet \(pending integration\)"),
    ),
}


def anchor_line(block: list[str], seq: int | None, words: str) -> str:
    """The block's checkpoint line at ``seq`` matching ``words``."""
    at = "" if seq is None else f"seq {seq}"
    pattern = re.compile(rf"^checkpoint +{at} +{words.replace('{seq}', str(seq))}")
    found = [line for line in block if pattern.search(line)]
    assert found, f"no checkpoint line at {at or 'no seq'} matching {words!r} in:\n" + "\n".join(
        block
    )
    return found[0]


@pytest.mark.parametrize("case", JOURNAL_CASES)
async def test_the_owner_changing_the_journal_is_detected(new_user: NewUser, case: str) -> None:
    spec = JOURNAL_CASES[case]
    saga_id = new_user.sagas.get(spec.role) or f"new-user-forged-{uuid.uuid4().hex[:8]}"
    control = new_user.sagas["control"]

    await spec.attack(new_user.owner, saga_id)
    named = await new_user.shell("verify", saga_id, control)
    every = await new_user.shell("verify", "--all")

    assert named.code == 1, named
    seq, words = spec.verify
    line = anchor_line(named.failed_block(saga_id), seq, words)
    assert f"ok      {control}  4 rows" in named.stdout, named
    assert re.search(r"^2 sagas, \d+ rows: 1 failed", named.stdout, re.M), named
    # `verify --all`, which a user runs without knowing what to look for, names it the same way
    assert every.code == 1, every
    assert line in every.failed_block(saga_id), every
    assert f"FAILED  {control}" not in every.stdout, every
    # the transparency log's tree head, published before the attack
    logged = await new_user.shell("log", "verify")
    assert logged.code == 1, logged  # (earlier tests' attacks fail it too)
    first_seq, log_words = spec.log
    found = logged.log_findings(saga_id)
    pattern = log_words.replace("{saga}", re.escape(saga_id)).replace("{seq}", str(first_seq))
    assert found and re.search(f"^{pattern}", found[0]), logged


# --------------------------------------------------------------------------------------------------
# The bundle's classes: its holder edits the files, the auditor runs the README's command


def jsonl(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    text = "".join(
        json.dumps(r, ensure_ascii=False, separators=(",", ":"), sort_keys=True) + "\n"
        for r in rows
    )
    path.write_text(text, encoding="utf-8")


def fix_manifest(bundle: Path, rows: list[dict[str, Any]], **fields: Any) -> None:
    """Rewrite manifest.json to match the bundle as it now is: heads, digests, ``fields``."""
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    manifest.update(fields)
    for saga in manifest["sagas"]:
        mine = [r for r in rows if r["saga_id"] == saga["saga_id"]]
        saga.update(rows=len(mine), head_seq=mine[-1]["seq"], head_hash=mine[-1]["hash"])
        saga["checkpointed"] = (bundle / "checkpoints").is_dir()
    manifest["files"] = {
        p.relative_to(bundle).as_posix(): {
            "sha256": hashlib.sha256(p.read_bytes()).hexdigest(),
            "bytes": p.stat().st_size,
        }
        for p in sorted(bundle.rglob("*"))
        if p.is_file() and p.name not in ("manifest.json", "manifest.sig")
    }
    text = json.dumps(manifest, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    (bundle / "manifest.json").write_text(text, encoding="utf-8")


def strip_head(bundle: Path) -> None:
    """The log's tree head and inclusion proofs removed, and the manifest's word of them: what
    a holder without the log's key cannot sign again."""
    shutil.rmtree(bundle / "tlog")
    manifest = json.loads((bundle / "manifest.json").read_text(encoding="utf-8"))
    manifest.pop("tlog")
    manifest["anchors"].remove("tlog")
    (bundle / "manifest.json").write_text(json.dumps(manifest), encoding="utf-8")


def strip_anchors(bundle: Path, saga_id: str) -> None:
    """Checkpoints, tree head, key and signature removed, 2 rows dropped, the manifest rewritten
    to match."""
    strip_head(bundle)
    strip_but_head(bundle, saga_id)


def strip_but_head(bundle: Path, saga_id: str) -> None:
    """Checkpoints, key and signature removed, 2 rows dropped, the manifest rewritten to match;
    the tree head and its inclusion proofs left in."""
    shutil.rmtree(bundle / "checkpoints")
    (bundle / "manifest.sig").unlink()
    (bundle / "public_key.pem").unlink()
    rows = jsonl(bundle / "journal.jsonl")[:-2]
    write_jsonl(bundle / "journal.jsonl", rows)
    fix_manifest(bundle, rows, anchors=[], key_id=None)


def strip_anchors_only(bundle: Path, saga_id: str) -> None:
    """Checkpoints and signature removed; the manifest left as exported."""
    shutil.rmtree(bundle / "checkpoints")
    (bundle / "manifest.sig").unlink()


def resign(bundle: Path, saga_id: str) -> None:
    """Row 2's result edited and the chain recomputed; checkpoints, public key and manifest
    signed again, all with the holder's own key, as the formats say; the log's tree head, signed
    by a key they do not hold, removed."""
    strip_head(bundle)
    theirs = Ed25519PrivateKey.generate()
    rows = jsonl(bundle / "journal.jsonl")
    rows[1]["payload"] = '{"reservation_id": "r-mallory"}'
    rows = rechain(rows)
    write_jsonl(bundle / "journal.jsonl", rows)
    (log,) = (bundle / "checkpoints").iterdir()
    log.write_text("".join(sign(theirs, saga_id, r["seq"], r["hash"]).line() + "\n" for r in rows))
    (bundle / "public_key.pem").write_bytes(public_pem(theirs.public_key()))
    fix_manifest(bundle, rows, key_id=key_id(theirs.public_key()))
    signature = theirs.sign(b"sagacity-bundle-v2\n" + (bundle / "manifest.json").read_bytes())
    (bundle / "manifest.sig").write_text(
        json.dumps(
            {
                "key_id": key_id(theirs.public_key()),
                "signature": base64.b64encode(signature).decode("ascii"),
            }
        )
    )


def flip_a_byte(bundle: Path, saga_id: str) -> None:
    """One byte of row 2's result in journal.jsonl, nothing else."""
    path = bundle / "journal.jsonl"
    data = bytearray(path.read_bytes())
    row_2 = data.index(b'"seq":2')
    line_start = data.rindex(b"\n", 0, row_2) + 1
    at = data.index(b'"payload":"', line_start) + len(b'"payload":"') + 3
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@dataclass(frozen=True)
class BundleCase:
    change: Callable[[Path, str], None]
    #: exit status, verdict word, and patterns every one of which the output must match
    code: int
    verdict: str
    names: tuple[str, ...]
    trusted: bool = True


BUNDLE_CASES = {
    "stripped of its anchors, manifest rewritten (2 rows dropped)": BundleCase(
        strip_anchors,
        1,
        "UNANCHORED, refused",
        (
            r"- no signed checkpoint for saga '{saga}': ",
            r"- the manifest is not signed: a saga removed whole",
        ),
    ),
    "stripped of all but the tree head, manifest rewritten (2 rows dropped)": BundleCase(
        strip_but_head,
        1,
        "FAILED",
        (
            r"^FAILED  {saga}\n  log +seq \d+ +disagrees: the inclusion proof is of seq \d+, "
            r"which the bundle does not hold",
        ),
    ),
    "stripped of its anchors, manifest as exported": BundleCase(
        strip_anchors_only,
        1,
        "FAILED",
        (
            r"^FAILED  checkpoints/{saga}.jsonl: listed in the manifest but missing",
            r"checkpoints: the manifest says the bundle has signed checkpoints, but there are none",
            r"manifest.sig: the manifest says it was signed, but there is no signature",
        ),
    ),
    "re-signed with another key": BundleCase(
        resign,
        1,
        "FAILED",
        (
            r"public_key.pem: the bundle's key (\w+) is not the key you trust \({key}\)",
            r"FAILED  {saga}\n  checkpoint +invalid: .*signed by key \w+, not by the trusted key "
            r"{key}",
        ),
    ),
    "re-signed with another key, no trusted key given": BundleCase(
        resign,
        3,
        "UNTRUSTED",
        (r"no trusted key: checked with the bundle's own key (\w+)",),
        trusted=False,
    ),
    "one byte flipped in the rows": BundleCase(
        flip_a_byte,
        1,
        "FAILED",
        (
            r"journal.jsonl: SHA-256 is \w+… but the manifest says \w+…",
            r"FAILED  {saga}\n  chain +seq 2 +disagrees: ",
        ),
    ),
}


@pytest.mark.parametrize("case", BUNDLE_CASES)
async def test_a_changed_bundle_is_refused(new_user: NewUser, case: str, tmp_path: Path) -> None:
    spec = BUNDLE_CASES[case]
    saga_id = new_user.sagas["bundle"]
    bundle = tmp_path / "evidence"
    shutil.copytree(new_user.bundle, bundle)

    spec.change(bundle, saga_id)
    if spec.trusted:  # the README's command
        run = await new_user.shell(
            "verify", "--bundle", str(bundle), "--trust", new_user.trust_file
        )
    else:  # an auditor with none of the dev stack's settings, and no key
        run = await new_user.shell(
            "verify",
            "--bundle",
            str(bundle),
            SAGACITY_TRUST_FILE=None,
            SAGACITY_SIGNING_KEY=None,
            SAGACITY_CHECKPOINT_DIR=None,
        )

    assert run.code == spec.code, run
    assert re.search(rf"^1 sagas, \d+ rows: {spec.verdict}", run.stdout, re.M), run
    for pattern in spec.names:
        filled = pattern.replace("{saga}", re.escape(saga_id)).replace("{key}", new_user.key_id)
        assert re.search(filled, run.stdout, re.M), f"{filled!r} not in\n{run}"


# --------------------------------------------------------------------------------------------------
# The anchors folder as well: what the log still says when a saga's checkpoint file is changed


def checkpoint_file(new_user: NewUser, saga_id: str) -> Path:
    return Path(new_user.shell.exports["SAGACITY_CHECKPOINT_DIR"]) / f"{saga_id}.jsonl"


async def rolled_back(owner: Owner, file: Path, saga_id: str) -> None:
    """The saga's checkpoint ``file`` cut back to mid-saga (the seal at seq 4 gone), then row 3
    changed and the chain recomputed from it: the checkpoints left agree with the journal."""
    kept = [line for line in file.read_text().splitlines() if json.loads(line)["seq"] <= 2]
    file.write_text("".join(line + "\n" for line in kept))

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[2]["input"] = rows[2]["input"].replace('"p-2"', '"p-mallory"')
        return rows

    await owner.rewrite(saga_id, change)


async def test_a_checkpoint_file_rolled_back_with_its_tail_rewritten_is_named_by_verify(
    new_user: NewUser,
) -> None:
    saga_id, control = new_user.sagas["rolledback"], new_user.sagas["control"]
    await rolled_back(new_user.owner, checkpoint_file(new_user, saga_id), saga_id)

    every = await new_user.shell("verify", "--all")
    named = await new_user.shell("verify", saga_id, control)
    for run in (every, named):
        assert run.code == 1, run
        block = run.failed_block(saga_id)
        assert any(re.match(r"^checkpoint +seq 2 +agrees", line) for line in block), block
        rewritten = rf"^log +seq 3 +disagrees: row 3 is hashed \w+… in the journal but \w+… in {LOGGED}: rewritten after it was logged$"
        assert re.match(rewritten, block[0]), block
        assert any(re.match(r"^log +seq 4 +disagrees: row 4 ", line) for line in block), block
        assert f"FAILED  {control}" not in run.stdout, run
    assert re.search(
        rf"^ok      {control}  4 rows  \[checkpoint agrees .*; log agrees", named.stdout, re.M
    ), named


async def test_a_saga_deleted_with_its_checkpoint_file_is_named_by_verify_all(
    new_user: NewUser,
) -> None:
    saga_id = new_user.sagas["erased"]
    checkpoint_file(new_user, saga_id).unlink()
    await deleted_saga(new_user.owner, saga_id)

    every = await new_user.shell("verify", "--all")
    assert every.code == 1, every
    block = every.failed_block(saga_id)
    for seq in (1, 2, 3, 4):
        pattern = rf"^log +seq {seq} +disagrees: in {LOGGED} but gone from the journal: deleted$"
        assert any(re.match(pattern, line) for line in block), block
