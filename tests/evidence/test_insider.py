"""Issue 27's acceptance attack suite: the database superuser plus write access to every folder
the workers write, against the dev stack's default configuration as a new user gets it.

The set-up is ``sagacity dev``'s own (``DevStack.prepare``: a fresh database, the
``sagacity_app`` login, the signing key and checkpoint folder in ``<data>/anchors``, the dev
witness, the trust file in ``<data>/trust``); a real worker runs real Order sagas, some through
the approval gate (approved, or aborted, with the dev approver's key), and its sequencer
publishes tree heads the dev witness cosigns. The insider then works as the tables' owner (plain
SQL, hashes from docs/hash-rules.md alone), as the app login, and with the workers' folders
(``anchors/``: signing key, ``checkpoints/``, ``checkpoints/tlog``). What they may not touch is
the trust file and the witness's own folder: those are the roots kept out of their reach.

Each case must fail what a user runs with default flags: ``sagacity verify --all`` names the
saga and the seq (or the log's head for a log-level attack), and the offline bundle verifier
(``sagacity export`` then ``sagacity verify --bundle DIR --trust FILE``) names it too or refuses
the bundle (FAILED / UNTRUSTED / STALE), while a clean saga beside it still verifies. The helpers
are test_default_config_tamper's (the user's shell, the owner's SQL, the classic classes).
"""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from temporalio.client import Client, WorkflowHandle

from sagacity.devstack import DevStack, Endpoints
from sagacity.evidence.checkpoints import Kind, log_name, sign
from sagacity.evidence.keys import generate_key, public_pem
from sagacity.settings import Settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.temporal.models import SagaResult, SagaState
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import running_worker
from tests.approvals.test_decisions_bound import edit_inputs
from tests.approvals.test_signed import refusals
from tests.evidence.test_default_config_tamper import (
    INSERT_ROW,
    JOURNAL_CASES,
    TWO_STEPS,
    Owner,
    Run,
    Shell,
    anchor_line,
    dev_exports,
    forged_saga,
)
from tests.temporal.conftest import awaiting_approval, wait_for
from tests.temporal.test_crash import OPTIONS
from workflows.order import shop as order_shop
from workflows.order.shop import Shop
from workflows.order.workflows import OrderRequest

#: two-call sagas, by the attack each is kept for ("control" is never touched); the classic
#: classes' roles are test_default_config_tamper's
PLAIN = (
    "control",
    "keyswap",
    "rollback",
    "stale",
    "edit",
    "recomputed",
    "truncated",
    "deleted",
    "reordered",
    "appended",
)
#: Order sagas through the approval gate, approved with the dev approver's key
APPROVED = ("approved-input", "request-input", "approver-name", "halted")
#: Order sagas aborted at the gate with the dev approver's key
ABORTED = ("abort-operator",)
#: two-call sagas run after the insider copied the anchors folder
LATER = ("later-1", "later-2")
BAD_VERDICTS = ("FAILED", "UNTRUSTED", "STALE", "UNANCHORED")


@dataclass
class Insider:
    shell: Shell
    owner: Owner
    app: Owner  # the worker's login, sagacity_app
    sagas: dict[str, str]
    trust_file: str
    anchors: Path  # <data>/anchors: the workers' folder
    checkpoint_dir: Path
    settings: Settings  # the worker's
    #: the journal seq of each gated saga's AWAITING_APPROVAL row
    requests: dict[str, int]
    approver: str
    halt_refusals: list[str]
    #: the checkpoints folder (with tlog/) as it was before the LATER sagas ran
    early_anchors: Path
    #: the "stale" saga's bundle, exported before the LATER sagas ran
    early_bundle: Path
    control: dict[str, Run]
    tmp: Path

    def saga(self, role: str) -> str:
        return self.sagas[role]


async def rows_in_journal(owner: Owner) -> int:
    async with await psycopg.AsyncConnection.connect(owner.url) as conn:
        row = await (await conn.execute("SELECT count(*) FROM side_effect_journal")).fetchone()
    assert row is not None
    return int(row[0])


async def logged(checkpoint_dir: Path, rows: int) -> None:
    """Wait until the worker's sequencer published a tree head of ``rows`` leaves."""
    note = checkpoint_dir / "tlog" / "checkpoint"
    for _ in range(200):
        if note.is_file() and int(note.read_text().splitlines()[1]) >= rows:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the worker published no tree head of {rows} leaves in 40 s")


async def two_step_sagas(settings: Settings, client: Client, sagas: list[str]) -> None:
    results = await asyncio.gather(
        *(
            client.execute_workflow(
                STEPS_WORKFLOW, TWO_STEPS, id=saga_id, task_queue=settings.task_queue,
                result_type=SagaResult,
            )
            for saga_id in sagas
        )
    )  # fmt: skip
    for result in results:
        assert result.status is SagaState.COMPLETED and result.head.seq == 4, result


async def start_order(
    client: Client, settings: Settings, saga_id: str
) -> WorkflowHandle[Any, SagaResult]:
    return await client.start_workflow(
        "order.PlaceOrder",
        OrderRequest(quantity=1, options=OPTIONS),
        id=saga_id,
        task_queue=settings.task_queue,
        result_type=SagaResult,
    )


async def intent_of(owner: Owner, saga_id: str, tool: str) -> None:
    """Wait until ``saga_id`` journaled the INTENT of ``tool``."""
    for _ in range(150):
        if any(r["tool_name"] == tool for r in await owner.rows(saga_id)):
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"{saga_id} wrote no INTENT of {tool} in 30 s")


@pytest.fixture(scope="module")
async def insider(
    endpoints: Endpoints,
    settings: Settings,
    temporal_client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Insider]:
    name = f"sagacity_insider_{uuid.uuid4().hex[:10]}"
    owner_url = await ensure_database(endpoints.database_url, name)
    tmp = tmp_path_factory.mktemp("insider")
    try:
        fresh = settings.model_copy(
            update={
                "owner_database_url": owner_url,
                "database_url": None,
                "signing_key": None,
                "checkpoint_public_key": None,
                "trust_file": None,
                "checkpoint_dir": None,
                "keyring": None,
                "approver_key": None,
                "service_key": None,
                "data_dir": tmp / ".sagacity",
            }
        )
        setup = await DevStack(fresh, postgres=False, temporal=False).prepare()
        assert setup.key_created and setup.approver is not None
        exports = dev_exports(endpoints, setup)
        shell = Shell(exports)
        worker = fresh.model_copy(
            update={
                **setup.settings(),
                "temporal_address": endpoints.temporal_address,
                "temporal_namespace": endpoints.temporal_namespace,
                "task_queue": f"tq-{uuid.uuid4()}",
                "log_interval": timedelta(seconds=0.5),
            }
        )
        run = uuid.uuid4().hex[:8]
        sagas = {role: f"insider-{role}-{run}" for role in (*PLAIN, *APPROVED, *ABORTED, *LATER)}
        owner, app = Owner(owner_url), Owner(exports["SAGACITY_DATABASE_URL"])
        try:
            before: Shop | None = order_shop.current()
        except RuntimeError:
            before = None
        try:
            async with running_worker(worker, ["workflows.order.app"], graceful_s=1):
                gated: dict[str, WorkflowHandle[Any, SagaResult]] = {}
                for role in (*APPROVED, *ABORTED):
                    if role != "halted":
                        gated[role] = await start_order(temporal_client, worker, sagas[role])
                await two_step_sagas(worker, temporal_client, [sagas[r] for r in PLAIN])
                # case 7: an unsigned halt, policy compensate, sent by the plain Temporal client
                # to a saga whose create_order call is running
                shop = order_shop.current()
                await shop.arm_fault("create_order", "", times=1, delay_s=6)
                gated["halted"] = await start_order(temporal_client, worker, sagas["halted"])
                await intent_of(owner, sagas["halted"], "create_order")
                await gated["halted"].signal(
                    "halt",
                    {"halt_id": 424242, "policy": "compensate", "operator": "ops",
                     "reason": "insider"},
                )  # fmt: skip
                halt_refusals = await refusals(gated["halted"], 1)
                requests = {}
                for role, handle in gated.items():
                    status = await wait_for(handle, awaiting_approval)
                    assert status.pending_approval is not None and not status.halted, status
                    requests[role] = status.pending_approval.journal_seq
                for role in APPROVED:
                    said = await shell("approvals", "approve", sagas[role], str(requests[role]))
                    assert said.code == 0, said
                for role in ABORTED:
                    said = await shell("saga", "abort", sagas[role], "--reason", "customer called")
                    assert said.code == 0, said
                for role, handle in gated.items():
                    result = await handle.result()
                    want = SagaState.ABORTED if role in ABORTED else SagaState.COMPLETED
                    assert result.status is want, (role, result)
                await logged(setup.checkpoint_dir, await rows_in_journal(owner))
                # the insider keeps a copy of the anchors, and an old bundle
                early_anchors = tmp / "early-checkpoints"
                shutil.copytree(setup.checkpoint_dir, early_anchors)
                early_bundle = tmp / "early-bundle"
                said = await shell("export", sagas["stale"], "--out", str(early_bundle))
                assert said.code == 0, said
                await asyncio.sleep(1.1)  # the later sagas' heads are signed a second later
                await two_step_sagas(worker, temporal_client, [sagas[r] for r in LATER])
                await logged(setup.checkpoint_dir, await rows_in_journal(owner))
        finally:
            if before is not None:
                order_shop.use(before)
        control = {
            "verify --all": await shell("verify", "--all"),
            "log verify": await shell("log", "verify"),
        }
        yield Insider(
            shell, owner, app, sagas, exports["SAGACITY_TRUST_FILE"], setup.signing_key.parent,
            setup.checkpoint_dir, worker, requests, setup.approver, halt_refusals,
            early_anchors, early_bundle, control, tmp,
        )  # fmt: skip
    finally:
        await drop_database(endpoints.database_url, name)


# --------------------------------------------------------------------------------------------------
# What the user runs after each attack


async def verify_all_names(ins: Insider, saga_id: str, seq: int | None) -> Run:
    """``sagacity verify --all`` fails ``saga_id`` at ``seq``; the control saga verifies."""
    every = await ins.shell("verify", "--all")
    assert every.code == 1, every
    found = every.failed_block(saga_id)
    if seq is not None:
        assert any(re.search(rf"\bseq {seq}\b", line) for line in found), (
            f"seq {seq} of {saga_id} not named:\n{every}"
        )
    assert f"FAILED  {ins.saga('control')}" not in every.stdout, every
    return every


async def bundle_names(ins: Insider, saga_id: str, seq: int | None) -> Run:
    """``export`` of the saga and the control saga, then ``verify --bundle --trust``: the saga
    (and ``seq``) named, or the bundle refused; the control saga is not blamed."""
    out = ins.tmp / f"bundle-{uuid.uuid4().hex[:8]}"
    exported = await ins.shell("export", saga_id, ins.saga("control"), "--out", str(out))
    if exported.code != 0:  # the export refuses, naming the saga
        assert saga_id in exported.stdout + exported.stderr, exported
        return exported
    checked = await ins.shell("verify", "--bundle", str(out), "--trust", ins.trust_file)
    assert checked.code != 0, checked
    assert re.search(rf"rows: ({'|'.join(BAD_VERDICTS)})", checked.stdout), checked
    if f"FAILED  {saga_id}" in checked.stdout and seq is not None:
        found = checked.failed_block(saga_id)
        assert any(re.search(rf"\bseq {seq}\b", line) for line in found), checked
    assert f"FAILED  {ins.saga('control')}" not in checked.stdout, checked
    return checked


async def named_everywhere(ins: Insider, role: str, seq: int | None) -> tuple[Run, Run]:
    saga_id = ins.saga(role)
    return await verify_all_names(ins, saga_id, seq), await bundle_names(ins, saga_id, seq)


def test_the_untouched_journal_verifies_with_exit_0(insider: Insider) -> None:
    for run in insider.control.values():
        assert run.code == 0, run
    total = len(insider.sagas)
    assert f"{total} sagas, " in insider.control["verify --all"].stdout, insider.control
    note = (insider.checkpoint_dir / "tlog" / "checkpoint").read_text()
    assert "\n\u2014 sagacity.local/witness " in note, note


# --------------------------------------------------------------------------------------------------
# 1. key swap


async def test_a_key_swapped_in_the_anchors_folder_and_resigned_checkpoints_are_named(
    insider: Insider,
) -> None:
    saga_id = insider.saga("keyswap")
    key_file = insider.anchors / "signing-key.pem"
    pub_file = insider.anchors / "signing-key.pem.pub"
    honest_key, honest_pub = key_file.read_bytes(), pub_file.read_bytes()
    theirs_file = insider.tmp / "mallory.pem"
    theirs = generate_key(theirs_file)
    try:
        key_file.write_bytes(theirs_file.read_bytes())
        pub_file.write_bytes(public_pem(theirs.public_key()))

        def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
            rows[1]["payload"] = '{"reservation_id": "r-mallory"}'
            return rows

        await insider.owner.rewrite(saga_id, change)
        rows = await insider.owner.rows(saga_id)
        lines = [sign(theirs, saga_id, r["seq"], r["hash"]).line() for r in rows]
        last = rows[-1]
        lines.append(
            sign(theirs, saga_id, last["seq"], last["hash"], kind=Kind.SEALED,
                 state="completed").line()
        )  # fmt: skip
        (insider.checkpoint_dir / log_name(saga_id)).write_text("\n".join(lines) + "\n")

        await named_everywhere(insider, "keyswap", 2)
    finally:
        key_file.write_bytes(honest_key)
        pub_file.write_bytes(honest_pub)


# --------------------------------------------------------------------------------------------------
# 2. decisions


async def test_an_approved_rows_input_edited_and_recomputed_is_named(insider: Insider) -> None:
    saga_id, request = insider.saga("approved-input"), insider.requests["approved-input"]
    honest = await insider.owner.rows(saga_id)
    order_id = json.loads(honest[request - 1]["input"])["order_id"]
    await insider.owner.rewrite(saga_id, edit_inputs(request + 1, order_id, "o-forged"))
    every, _ = await named_everywhere(insider, "approved-input", request + 1)
    assert "disagrees" in every.stdout


async def test_the_request_edited_too_is_named(insider: Insider) -> None:
    saga_id, request = insider.saga("request-input"), insider.requests["request-input"]
    honest = await insider.owner.rows(saga_id)
    order_id = json.loads(honest[request - 1]["input"])["order_id"]
    await insider.owner.rewrite(saga_id, edit_inputs(request, order_id, "o-forged"))
    await named_everywhere(insider, "request-input", request + 1)


async def test_an_approvers_name_edited_is_named(insider: Insider) -> None:
    saga_id, at = insider.saga("approver-name"), insider.requests["approver-name"] + 1
    rows = await insider.owner.rows(saga_id)
    assert insider.approver in rows[at - 1]["payload"], rows[at - 1]

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[at - 1]["payload"] = rows[at - 1]["payload"].replace(insider.approver, "mallory")
        return rows

    await insider.owner.rewrite(saga_id, change)
    await named_everywhere(insider, "approver-name", at)


async def test_an_abort_rows_operator_edited_is_named(insider: Insider) -> None:
    saga_id, at = insider.saga("abort-operator"), insider.requests["abort-operator"] + 1
    rows = await insider.owner.rows(saga_id)
    assert '"abort":true' in rows[at - 1]["payload"].replace(" ", ""), rows[at - 1]

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[at - 1]["payload"] = re.sub(
            r'"by": ?"[^"]*"', '"by":"mallory"', rows[at - 1]["payload"]
        )
        return rows

    await insider.owner.rewrite(saga_id, change)
    await named_everywhere(insider, "abort-operator", at)


# --------------------------------------------------------------------------------------------------
# 3. rows inserted behind Sagacity's back


class Inserter(Owner):
    """A login at a ``psql`` prompt that only INSERTs: ``replace`` adds the rows, deletes none
    (the app login may not DELETE)."""

    async def replace(self, saga_id: str, rows: list[dict[str, Any]]) -> None:
        async with await psycopg.AsyncConnection.connect(self.url) as conn:
            for row in rows:
                await conn.execute(INSERT_ROW, row)
            await conn.commit()


@pytest.mark.parametrize("login", ["app", "owner"])
async def test_forged_backdated_rows_are_not_integrated_and_are_named(
    insider: Insider, login: str
) -> None:
    saga_id = f"insider-forged-{login}-{uuid.uuid4().hex[:6]}"
    insider.sagas[f"forged-{login}"] = saga_id
    note = insider.checkpoint_dir / "tlog" / "checkpoint"
    size = int(note.read_text().splitlines()[1])
    await forged_saga(Inserter((insider.app if login == "app" else insider.owner).url), saga_id)

    integrated = await insider.shell("log", "integrate")
    assert int(note.read_text().splitlines()[1]) == size, integrated
    checked = await insider.shell("log", "verify")
    assert checked.code == 1, checked
    found = "\n".join(checked.log_findings(saga_id))
    assert re.search(r"seq 1: .*(forged|backdated)", found), checked
    await verify_all_names(insider, saga_id, None)
    await bundle_names(insider, saga_id, None)


# --------------------------------------------------------------------------------------------------
# 4. rollback of one saga's checkpoints with its tail rewritten (the whole folder: last)


async def test_one_sagas_checkpoints_rolled_back_and_its_tail_rewritten_are_named(
    insider: Insider,
) -> None:
    saga_id = insider.saga("rollback")
    log = insider.checkpoint_dir / log_name(saga_id)
    kept = [ln for ln in log.read_text().splitlines() if json.loads(ln)["seq"] <= 2]
    assert kept and len(kept) < len(log.read_text().splitlines())
    log.write_text("\n".join(kept) + "\n")

    def change(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        rows[3]["payload"] = '{"order_id": "o-mallory"}'
        return rows

    await insider.owner.rewrite(saga_id, change)
    await named_everywhere(insider, "rollback", 4)


# --------------------------------------------------------------------------------------------------
# 5. an old bundle presented as current


async def test_an_old_bundle_is_stale(insider: Insider) -> None:
    bundle, trust = str(insider.early_bundle), insider.trust_file
    as_exported = await insider.shell("verify", "--bundle", bundle, "--trust", trust)
    assert as_exported.code == 0, as_exported
    newer = str(insider.checkpoint_dir / "tlog" / "checkpoint")
    for flags in (("--checkpoint", newer), ("--not-older-than", "PT1S")):
        checked = await insider.shell("verify", "--bundle", bundle, "--trust", trust, *flags)
        assert checked.code == 1, checked
        assert re.search(r"rows: STALE", checked.stdout), checked


# --------------------------------------------------------------------------------------------------
# 7. an unsigned halt signal (sent while the fixture ran)


async def test_an_unsigned_halt_signal_was_refused_recorded_and_changed_nothing(
    insider: Insider,
) -> None:
    (refusal,) = insider.halt_refusals
    assert refusal.startswith("ops: halt 424242 refused"), refusal
    rows = await insider.owner.rows(insider.saga("halted"))
    assert [r["phase"] for r in rows if r["phase"] == "ABORTED"] == [], rows
    checked = await insider.shell("verify", insider.saga("halted"))
    assert checked.code == 0, checked


# --------------------------------------------------------------------------------------------------
# The classic classes, under the same insider


@pytest.mark.parametrize("case", [c for c in JOURNAL_CASES if JOURNAL_CASES[c].role != "forged"])
async def test_the_classic_classes_are_named(insider: Insider, case: str) -> None:
    spec = JOURNAL_CASES[case]
    saga_id = insider.saga(spec.role)
    await spec.attack(insider.owner, saga_id)
    seq, words = spec.verify
    every = await verify_all_names(insider, saga_id, seq)
    anchor_line(every.failed_block(saga_id), seq, words)
    await bundle_names(insider, saga_id, seq)


async def test_a_forged_saga_is_named(insider: Insider) -> None:
    saga_id = f"insider-forged-{uuid.uuid4().hex[:6]}"
    await forged_saga(insider.owner, saga_id)
    await verify_all_names(insider, saga_id, None)
    await bundle_names(insider, saga_id, None)


# --------------------------------------------------------------------------------------------------
# 6. a shadow journal table (runs after the others: it starts a worker)


async def test_a_shadow_journal_gets_no_row_and_is_refused(
    insider: Insider, temporal_client: Client
) -> None:
    shadow = "sagacity_app.side_effect_journal"
    saga_id = insider.sagas["shadowed"] = f"insider-shadowed-{uuid.uuid4().hex[:6]}"
    before = await rows_in_journal(insider.owner)
    settings = insider.settings.model_copy(update={"task_queue": f"tq-{uuid.uuid4()}"})
    try:
        async with running_worker(settings, ["workflows.order.app"], graceful_s=1):
            # made by the app login while a worker runs, as the reviewer did
            await insider.app.sql(f"CREATE TABLE {shadow} (LIKE public.side_effect_journal)")
            await two_step_sagas(settings, temporal_client, [saga_id])
        assert await rows_in_journal(insider.owner) == before + 4
        assert [r["seq"] for r in await insider.owner.rows(saga_id)] == [1, 2, 3, 4]
        async with await psycopg.AsyncConnection.connect(insider.owner.url) as conn:
            shadowed = await (await conn.execute(f"SELECT count(*) FROM {shadow}")).fetchone()
        assert shadowed == (0,)
        # the owner hands it over too; now neither doctor nor a worker's start goes on
        await insider.owner.sql(f"GRANT ALL ON {shadow} TO sagacity_app")
        doctor = await insider.shell("doctor", "--json")
        assert doctor.code != 0, doctor
        (finding,) = [
            f for f in json.loads(doctor.stdout)["findings"] if f["id"] == "shadowed_journal"
        ]
        assert "side_effect_journal" in finding["what"], finding
        with pytest.raises(Exception, match=re.escape(shadow)):
            async with running_worker(settings, ["workflows.order.app"], graceful_s=1):
                pass
    finally:
        await insider.owner.sql(f"DROP TABLE IF EXISTS {shadow}")
    assert (await insider.shell("verify", saga_id)).code == 0


# --------------------------------------------------------------------------------------------------
# 4b. the whole anchors folder restored from an earlier copy (last: it hides the later sagas)


async def test_the_anchors_folder_restored_from_an_earlier_copy_is_named(insider: Insider) -> None:
    shutil.rmtree(insider.checkpoint_dir)
    shutil.copytree(insider.early_anchors, insider.checkpoint_dir)
    hidden = insider.saga("later-1")
    checked = await insider.shell("log", "verify")
    assert checked.code == 1, checked
    rollback = re.search(
        r"^FAILED  witness \S+ cosigned tree head (\d+) .* the checkpoint store was rolled back",
        checked.stdout,
        re.M,
    )
    assert rollback, checked
    assert re.search(rf"^FAILED  saga '{hidden}' seq 1: leaf \d+: .*hidden by the rollback",
                     checked.stdout, re.M), checked  # fmt: skip
    every = await insider.shell("verify", "--all")
    assert every.code == 1, every
    assert f"FAILED  {insider.saga('control')}" not in every.stdout, every
    # default verify says what the witness holds: the rollback, and the saga and seq it hides
    assert "rolled back" in every.stdout, f"{every}\n{checked}"
    assert any(re.search(r"\bseq 1\b", line) for line in every.failed_block(hidden)), every

    # and with the hidden saga's rows deleted too, nothing of it left in the journal
    await insider.owner.sql(
        "DELETE FROM side_effect_journal WHERE saga_id = %s", insider.saga("later-2")
    )
    every = await insider.shell("verify", "--all")
    assert every.code == 1, every
    assert insider.saga("later-2") in every.stdout, every
