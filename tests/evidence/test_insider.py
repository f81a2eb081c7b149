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
import base64
import json
import os
import re
import shutil
import sys
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from temporalio.client import Client, WorkflowHandle

from sagacity.devstack import DevStack, Endpoints
from sagacity.evidence.checkpoints import Kind, log_name, sign
from sagacity.evidence.keys import generate_key, key_id, load_private_key, public_pem
from sagacity.evidence.rotation import ROTATIONS, record_rotation
from sagacity.evidence.trust import fingerprint, load_trust
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
    fix_manifest,
    forged_saga,
    fresh_clone,
    jsonl,
    rechain,
    strip_head,
    write_jsonl,
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
    "stolenkey",
    "rotated",
    "deep",
    "cutbundle",
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
#: an Order saga that fails at create_order and compensates slowly (a halt is sent meanwhile)
FAILING = "compensating"
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
    #: how the saga that was compensating when an unsigned halt came ended
    compensated: SagaResult
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


async def logged(checkpoint_dir: Path, rows: int, seconds: int = 40) -> None:
    """Wait until the worker's sequencer published a tree head of ``rows`` leaves."""
    note = checkpoint_dir / "tlog" / "checkpoint"
    for _ in range(5 * seconds):
        if note.is_file() and int(note.read_text().splitlines()[1]) >= rows:
            return
        await asyncio.sleep(0.2)
    raise AssertionError(f"the worker published no tree head of {rows} leaves in {seconds} s")


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
        # and the dev stack's own decision keys too (no keyring of the session's)
        fresh = fresh_clone(settings, owner_url, tmp, keyring=None, approver_key=None,
                            service_key=None)  # fmt: skip
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
        sagas = {
            role: f"insider-{role}-{run}" for role in (*PLAIN, *APPROVED, *ABORTED, *LATER, FAILING)
        }
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
                # and to a saga compensating after a failure
                await shop.arm_fault("create_order", "out of paper", times=1)
                await shop.arm_fault("release_inventory", "", times=1, delay_s=4)
                failing = await start_order(temporal_client, worker, sagas[FAILING])
                await wait_for(failing, lambda s: s.state is SagaState.COMPENSATING)
                await failing.signal(
                    "halt", {"halt_id": 0, "policy": "compensate", "operator": "ops"}
                )
                compensated = await failing.result()
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
            setup.checkpoint_dir, worker, requests, setup.approver, halt_refusals, compensated,
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


async def bundle_names(ins: Insider, saga_id: str) -> Run:
    """``export`` of the saga and the control saga, then ``verify --bundle --trust``: the saga
    failed, or the bundle refused; the control saga is not blamed.

    The bundle verifier names the seq it can prove wrong, which is not always the seq changed:
    a checkpoint file re-signed over a rewrite is caught by the last row's inclusion proof.
    """
    out = ins.tmp / f"bundle-{uuid.uuid4().hex[:8]}"
    exported = await ins.shell("export", saga_id, ins.saga("control"), "--out", str(out))
    if exported.code != 0:  # the export refuses, naming the saga
        assert saga_id in exported.stdout + exported.stderr, exported
        return exported
    checked = await ins.shell("verify", "--bundle", str(out), "--trust", ins.trust_file)
    assert checked.code != 0, checked
    assert re.search(rf"rows: ({'|'.join(BAD_VERDICTS)})", checked.stdout), checked
    named = f"FAILED  {saga_id}" in checked.stdout or f"saga '{saga_id}'" in checked.stdout
    assert named or re.search(r"^FAILED  (?!insider-)", checked.stdout, re.M), checked
    assert f"ok      {saga_id}" not in checked.stdout, checked
    assert f"FAILED  {ins.saga('control')}" not in checked.stdout, checked
    return checked


async def named_everywhere(ins: Insider, role: str, seq: int | None) -> tuple[Run, Run]:
    """The bundle verifier's word, then ``verify --all``'s."""
    saga_id = ins.saga(role)
    offline = await bundle_names(ins, saga_id)
    return await verify_all_names(ins, saga_id, seq), offline


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
    assert integrated.code == 1, integrated
    assert f"FAILED  saga '{saga_id}' seq 1: not logged: unattested" in integrated.stdout, (
        integrated
    )
    checked = await insider.shell("log", "verify")
    assert checked.code == 1, checked
    found = "\n".join(checked.log_findings(saga_id))
    assert re.search(r"seq 1: .*unattested", found), checked
    await verify_all_names(insider, saga_id, None)
    await bundle_names(insider, saga_id)


async def test_forged_rows_dated_in_the_future_are_named(insider: Insider) -> None:
    """Dated 2099: never 'older than the grace period' by their own clock."""
    saga_id = insider.sagas["future"] = f"insider-future-{uuid.uuid4().hex[:6]}"
    rows = [
        {**row, "timestamp": f"2099-01-01T00:00:0{n}.000000Z"}
        for n, row in enumerate(await forged_rows(saga_id))
    ]
    await Inserter(insider.app.url).replace(saga_id, rechain(rows))
    integrated = await insider.shell("log", "integrate")
    assert integrated.code == 1, integrated
    assert f"FAILED  saga '{saga_id}' seq 1: not logged: unattested" in integrated.stdout
    checked = await insider.shell("log", "verify")
    assert checked.code == 1, checked
    found = "\n".join(checked.log_findings(saga_id))
    assert re.search(r"FAILED .*seq 1: .*unattested", found), checked
    await verify_all_names(insider, saga_id, None)


async def forged_rows(saga_id: str) -> list[dict[str, Any]]:
    """The rows test_default_config_tamper's forged saga is made of."""
    rows: list[dict[str, Any]] = []

    class Keep(Owner):
        async def replace(self, saga_id: str, forged: list[dict[str, Any]]) -> None:
            rows.extend(forged)

    await forged_saga(Keep(""), saga_id)
    return rows


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


@pytest.mark.xfail(
    strict=True,
    reason="defect: rows 3-4 cut from the journal and the checkpoint lines above seq 2 (the seal "
    "too) cut from the workers' folder, then `sagacity export`: verify --all names seq 3 (the "
    "log holds it), but `verify --bundle --trust` prints VERIFIED (exit 0) for the 2-row prefix: "
    "its checkpoint at seq 2 is honest, the export proves row 2 in the newest witnessed head, "
    "and nothing says the unsealed saga had rows after its last checkpoint",
)
async def test_a_tail_cut_from_the_journal_and_its_checkpoint_file_then_exported_is_named(
    insider: Insider,
) -> None:
    """The insider cuts rows 3-4 and the checkpoint lines above seq 2 (its seal too), then runs
    the export themselves: every file of the bundle is signed, and the tree head proves row 2."""
    saga_id = insider.saga("cutbundle")
    await insider.owner.sql(
        "DELETE FROM side_effect_journal WHERE saga_id = %s AND seq > 2", saga_id
    )
    log = insider.checkpoint_dir / log_name(saga_id)
    kept = [ln for ln in log.read_text().splitlines() if json.loads(ln)["seq"] <= 2]
    log.write_text("\n".join(kept) + "\n")
    await verify_all_names(insider, saga_id, 3)
    await bundle_names(insider, saga_id)


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


async def test_an_unsigned_halt_to_a_compensating_saga_leaves_it_compensated(
    insider: Insider,
) -> None:
    result = insider.compensated
    assert result.status is SagaState.COMPENSATED, result
    assert result.error is not None and "out of paper" in result.error.message
    assert (await insider.shell("verify", insider.saga(FAILING))).code == 0


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
    await bundle_names(insider, saga_id)


async def test_a_forged_saga_is_named(insider: Insider) -> None:
    saga_id = f"insider-forged-{uuid.uuid4().hex[:6]}"
    await forged_saga(insider.owner, saga_id)
    await verify_all_names(insider, saga_id, None)
    await bundle_names(insider, saga_id)


# --------------------------------------------------------------------------------------------------
# Beyond the list


def resign_rewritten(
    checkpoint_dir: Path, key: Ed25519PrivateKey, rows: list[dict[str, Any]]
) -> None:
    """The saga's checkpoint file written again over ``rows``, every line signed by ``key``."""
    saga_id, last = rows[0]["saga_id"], rows[-1]
    lines = [sign(key, saga_id, r["seq"], r["hash"]).line() for r in rows]
    seal = sign(key, saga_id, last["seq"], last["hash"], kind=Kind.SEALED, state="completed")
    (checkpoint_dir / log_name(saga_id)).write_text("\n".join([*lines, seal.line()]) + "\n")


def mallory_reservation(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows[1]["payload"] = '{"reservation_id": "r-mallory"}'
    return rows


async def test_checkpoints_resigned_with_the_workers_own_key_are_named(insider: Insider) -> None:
    """The signing key lies in the workers' folder: whoever writes it can read it too."""
    saga_id = insider.saga("stolenkey")
    stolen = load_private_key(insider.anchors / "signing-key.pem")
    await insider.owner.rewrite(saga_id, mallory_reservation)
    resign_rewritten(insider.checkpoint_dir, stolen, await insider.owner.rows(saga_id))
    await named_everywhere(insider, "stolenkey", 2)


async def test_a_rotation_to_the_insiders_key_signed_with_the_stolen_key_is_named(
    insider: Insider,
) -> None:
    saga_id = insider.saga("rotated")
    stolen = load_private_key(insider.anchors / "signing-key.pem")
    theirs = Ed25519PrivateKey.generate()
    record_rotation(insider.checkpoint_dir, stolen, theirs.public_key())
    try:
        await insider.owner.rewrite(saga_id, mallory_reservation)
        resign_rewritten(insider.checkpoint_dir, theirs, await insider.owner.rows(saga_id))
        await named_everywhere(insider, "rotated", 2)
    finally:
        (insider.checkpoint_dir / ROTATIONS).unlink()


async def test_a_rotation_the_key_holder_made_leaves_verify_all_clean(insider: Insider) -> None:
    """``sagacity anchors rotate`` writes keys/rotations.jsonl apart from the sagas' checkpoint
    files: no saga's verdict reads it."""
    honest = load_private_key(insider.anchors / "signing-key.pem")
    record_rotation(insider.checkpoint_dir, honest, Ed25519PrivateKey.generate().public_key())
    try:
        every = await insider.shell("verify", "--all")
        assert "FAILED  rotations" not in every.stdout, every
    finally:
        (insider.checkpoint_dir / ROTATIONS).unlink()


async def test_a_loop_of_rotation_statements_ends_and_trusts_no_new_key(insider: Insider) -> None:
    """Statements in a ring (the insider's key to another and back, the last one signed with
    the key read from the workers' folder): verification ends, and the control saga verifies."""
    stolen = load_private_key(insider.anchors / "signing-key.pem")
    ring = [Ed25519PrivateKey.generate() for _ in range(3)]
    for signer, next_key in zip(ring, [*ring[1:], ring[0]], strict=True):
        record_rotation(insider.checkpoint_dir, signer, next_key.public_key())
    record_rotation(insider.checkpoint_dir, ring[0], stolen.public_key())
    try:
        every = await asyncio.wait_for(insider.shell("verify", "--all"), timeout=60)
        assert every.code in (0, 1), every
        assert f"FAILED  {insider.saga('control')}" not in every.stdout, every
        named = await insider.shell("verify", insider.saga("control"))
        assert named.code == 0, named
    finally:
        (insider.checkpoint_dir / ROTATIONS).unlink()


DEEP = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize("where", ["rotations.jsonl", "checkpoint file"])
async def test_a_deeply_nested_line_in_the_workers_folder_is_reported_not_a_crash(
    insider: Insider, where: str
) -> None:
    target = (
        insider.checkpoint_dir / ROTATIONS
        if where == "rotations.jsonl"
        else insider.checkpoint_dir / log_name(insider.saga("deep"))
    )
    saved = target.read_bytes() if target.exists() else None
    with target.open("a") as f:
        f.write(DEEP + "\n")
    try:
        every = await insider.shell("verify", "--all")  # the Shell fails on a traceback
        assert every.code in (0, 1), every
        assert f"FAILED  {insider.saga('control')}" not in every.stdout, every
        if where == "checkpoint file":
            assert every.code == 1 and insider.saga("deep") in every.stdout, every
    finally:
        if saved is None:
            target.unlink()
        else:
            target.write_bytes(saved)


async def test_a_deeply_nested_checkpoint_line_does_not_stop_the_sequencer(
    insider: Insider, temporal_client: Client
) -> None:
    """A forged saga's checkpoint file holding one hostile line: a sequencer pass reads it (to
    attest the forged rows) and must go on, naming them, and log the honest rows beside them."""
    forged = f"insider-deepforged-{uuid.uuid4().hex[:6]}"
    await forged_saga(insider.owner, forged)
    hostile = insider.checkpoint_dir / log_name(forged)
    hostile.write_text(DEEP + "\n")
    honest = insider.sagas["beside-deep"] = f"insider-beside-deep-{uuid.uuid4().hex[:6]}"
    settings = insider.settings.model_copy(update={"task_queue": f"tq-{uuid.uuid4()}"})
    try:
        note = insider.checkpoint_dir / "tlog" / "checkpoint"
        size = int(note.read_text().splitlines()[1])
        # the worker's own sequencer logs a saga run beside it
        async with running_worker(settings, ["workflows.order.app"], graceful_s=1):
            await two_step_sagas(settings, temporal_client, [honest])
            await logged(insider.checkpoint_dir, size + 4, seconds=10)  # its interval: 0.5 s
        integrated = await insider.shell("log", "integrate")
        assert integrated.code == 1, integrated
        assert f"FAILED  saga '{forged}' seq 1: not logged: unattested" in integrated.stdout
    finally:
        hostile.unlink()


async def test_a_trust_file_symlinked_into_the_workers_folder_is_refused(insider: Insider) -> None:
    inside = insider.anchors / "trust.json"
    shutil.copy(insider.trust_file, inside)
    link = insider.tmp / "trust-link.json"
    link.symlink_to(inside)
    try:
        every = await insider.shell("verify", "--all", SAGACITY_TRUST_FILE=str(link))
        assert every.code not in (0, 1), every
        assert "trust" in every.stderr and str(insider.anchors) in every.stderr, every
        bundle = await insider.shell(
            "verify", "--bundle", str(insider.early_bundle), "--trust", str(link)
        )
        assert bundle.code != 0, bundle
    finally:
        link.unlink()
        inside.unlink()


@pytest.mark.parametrize(
    "content",
    [
        b"\x00" * 64,
        b"\xff\xfe{}",
        b'{"format": "sagacity-trust", "version": 1, "signers": ' + DEEP.encode() + b"}",
    ],
    ids=["NUL", "invalid UTF-8", "deeply nested"],
)
async def test_a_bad_trust_file_is_a_clear_error(
    insider: Insider, content: bytes, tmp_path: Path
) -> None:
    bad = tmp_path / "trust.json"
    bad.write_bytes(content)
    for args in (("verify", "--all"), ("verify", "--bundle", str(insider.early_bundle))):
        run = await insider.shell(*args, SAGACITY_TRUST_FILE=str(bad))
        assert run.code not in (0, 1), run
        assert str(bad) in run.stderr, run


async def test_a_fingerprint_prefix_too_short_is_refused(insider: Insider) -> None:
    roots = load_trust(Path(insider.trust_file))
    full = fingerprint(roots.signers[0].key)
    for prefix in (full[:8], full[:15]):
        run = await insider.shell(
            "verify", "--bundle", str(insider.early_bundle), "--fingerprint", prefix,
            SAGACITY_TRUST_FILE=None,
        )  # fmt: skip
        assert run.code == 2, run
    run = await insider.shell(
        "verify", "--bundle", str(insider.early_bundle), "--fingerprint", full,
        SAGACITY_TRUST_FILE=None,
    )  # fmt: skip
    assert run.code == 0, run


def forge_tree_head(bundle: Path) -> None:
    """The bundle's tree head note: its size grown by one, the signatures left as they were."""
    (note,) = [
        p for p in (bundle / "tlog").rglob("*") if p.is_file() and p.read_text().count("\n\u2014 ")
    ]
    lines = note.read_text().split("\n")
    lines[1] = str(int(lines[1]) + 1)
    note.write_text("\n".join(lines))


@pytest.mark.parametrize(
    "change",
    [
        "forged tree head",
        "deeply nested manifest",
    ],
)
async def test_a_bundle_with_a_forged_head_or_a_hostile_manifest_is_refused(
    insider: Insider, change: str, tmp_path: Path
) -> None:
    bundle = tmp_path / "evidence"
    shutil.copytree(insider.early_bundle, bundle)
    if change == "forged tree head":
        forge_tree_head(bundle)
    else:
        (bundle / "manifest.json").write_text(DEEP)
    run = await insider.shell("verify", "--bundle", str(bundle), "--trust", insider.trust_file)
    assert run.code == 1, run
    assert re.search(r"rows: FAILED|FAILED", run.stdout), run


async def test_a_bundle_forged_with_the_workers_own_key_and_no_witnessed_head_is_refused(
    insider: Insider, tmp_path: Path
) -> None:
    """The insider re-signs a rewritten bundle with the key read from the workers' folder and
    drops the tree head no witness would cosign: only the trust file's quorum stands in the way."""
    stolen = load_private_key(insider.anchors / "signing-key.pem")
    bundle = tmp_path / "evidence"
    shutil.copytree(insider.early_bundle, bundle)
    rows = rechain(mallory_reservation(jsonl(bundle / "journal.jsonl")))
    write_jsonl(bundle / "journal.jsonl", rows)
    (log,) = (bundle / "checkpoints").iterdir()
    saga_id, last = rows[0]["saga_id"], rows[-1]
    seal = sign(stolen, saga_id, last["seq"], last["hash"], kind=Kind.SEALED, state="completed")
    log.write_text(
        "".join(sign(stolen, saga_id, r["seq"], r["hash"]).line() + "\n" for r in rows)
        + seal.line()
        + "\n"
    )
    strip_head(bundle)
    fix_manifest(bundle, rows)
    signature = stolen.sign(b"sagacity-bundle-v2\n" + (bundle / "manifest.json").read_bytes())
    (bundle / "manifest.sig").write_text(
        json.dumps(
            {
                "key_id": key_id(stolen.public_key()),
                "signature": base64.b64encode(signature).decode("ascii"),
            }
        )
    )
    run = await insider.shell("verify", "--bundle", str(bundle), "--trust", insider.trust_file)
    assert run.code != 0, run
    assert "rows: UNANCHORED, refused" in run.stdout, run
    assert "the trust file requires 1 witness cosignatures" in run.stdout, run


async def test_a_witness_fed_garbage_refuses_it_and_keeps_witnessing(insider: Insider) -> None:
    (witness,) = load_trust(Path(insider.trust_file)).witnesses
    assert witness.url is not None
    garbage = [b"", b"\x00\xff" * 1000, b"old 0\n\n" + DEEP.encode(), b"A" * 2_000_000]
    async with httpx.AsyncClient(base_url=witness.url, timeout=30) as http:
        for body in garbage:
            answer = await http.post("/add-checkpoint", content=body)
            assert 400 <= answer.status_code < 500, (body[:20], answer.status_code, answer.text)
    # the sequencer's next pass is answered as before (the next tests have it cosign new heads)
    integrated = await insider.shell("log", "integrate")
    assert not head_trouble(integrated.stdout), integrated
    checked = await insider.shell("log", "verify")
    assert not head_trouble(checked.stdout), checked


def head_trouble(output: str) -> list[str]:
    """The lines of ``log integrate`` / ``log verify`` about the heads or the witnesses (not
    the earlier tests' forged rows, which they name too)."""
    return [
        line
        for line in output.splitlines()
        if re.match(r"FAILED  (witness|tree head)", line)
        or re.search(r"witness.*(refus|unreach)", line)
    ]


def strip_cosignatures(tlog: Path) -> None:
    """Every witness cosignature line taken out of the published heads (the note and the list)."""

    def bare(note: str) -> str:
        return "".join(
            line
            for line in note.splitlines(keepends=True)
            if "\u2014 sagacity.local/witness " not in line
        )

    (tlog / "checkpoint").write_text(bare((tlog / "checkpoint").read_text()))
    heads = [json.loads(line) for line in (tlog / "checkpoints.jsonl").read_text().splitlines()]
    (tlog / "checkpoints.jsonl").write_text(
        "".join(json.dumps({**h, "note": bare(h["note"])}) + "\n" for h in heads)
    )


async def test_witness_cosignatures_stripped_from_the_published_heads_are_named(
    insider: Insider,
) -> None:
    tlog = insider.checkpoint_dir / "tlog"
    saved = insider.tmp / f"tlog-{uuid.uuid4().hex[:6]}"
    shutil.copytree(tlog, saved)
    try:
        strip_cosignatures(tlog)
        checked = await insider.shell("log", "verify")
        assert checked.code == 1, checked
        assert re.search(
            r"^FAILED  tree head \d+ .*has 0 of the 1 witness cosignatures", checked.stdout, re.M
        ), checked
        out = insider.tmp / f"bundle-{uuid.uuid4().hex[:8]}"
        exported = await insider.shell("export", insider.saga("control"), "--out", str(out))
        if exported.code == 0:
            run = await insider.shell("verify", "--bundle", str(out), "--trust", insider.trust_file)
            assert run.code != 0, run
    finally:
        shutil.rmtree(tlog)
        shutil.copytree(saved, tlog)


async def test_concurrent_sequencers_keep_one_consistent_witnessed_log(
    insider: Insider, temporal_client: Client
) -> None:
    # rows no sequencer logged yet: a worker whose own sequencer waits an hour
    settings = insider.settings.model_copy(
        update={"task_queue": f"tq-{uuid.uuid4()}", "log_interval": timedelta(hours=1)}
    )
    saga_id = insider.sagas["raced"] = f"insider-raced-{uuid.uuid4().hex[:6]}"
    async with running_worker(settings, ["workflows.order.app"], graceful_s=1):
        await asyncio.sleep(1)  # its first pass, at start, is over
        await two_step_sagas(settings, temporal_client, [saga_id])
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("SAGACITY_", "TEMPORAL_"))},
        **insider.shell.exports,
    }
    command = str(Path(sys.executable).with_name("sagacity"))
    procs = [
        await asyncio.create_subprocess_exec(
            command,
            "log",
            "integrate",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        for _ in range(3)
    ]
    outs = [await p.communicate() for p in procs]
    said = "\n".join(
        f"exit {p.returncode}: {o.decode()}{e.decode()}"
        for p, (o, e) in zip(procs, outs, strict=True)
    )
    # exit 1 for the earlier tests' unattested rows, named each time; one pass logs the saga
    assert all(p.returncode in (0, 1) for p in procs), said
    assert not head_trouble(said) and said.count(" rows appended; published tree head ") == 1, said
    checked = await insider.shell("log", "verify")
    assert not head_trouble(checked.stdout), f"{said}\n{checked}"
    assert not checked.log_findings(saga_id), f"{said}\n{checked}"
    assert (await insider.shell("verify", saga_id)).code == 0


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
    assert re.search(
        rf"^FAILED  transparency log: +saga '{hidden}' seq 1: leaf \d+: .*hidden by the rollback",
        every.stdout,
        re.M,
    ), every


async def test_the_anchors_folder_restored_and_a_hidden_saga_deleted_is_named(
    insider: Insider,
) -> None:
    """After the restore above, the insider deletes one of the sagas it hid: no row of it is
    left in the journal, no checkpoint of it in the folder; the witness holds the head."""
    hidden = insider.saga("later-2")
    shutil.rmtree(insider.checkpoint_dir)
    shutil.copytree(insider.early_anchors, insider.checkpoint_dir)
    await insider.owner.sql("DELETE FROM side_effect_journal WHERE saga_id = %s", hidden)
    every = await insider.shell("verify", "--all")
    assert every.code == 1, every
    assert hidden in every.stdout, every
    assert f"FAILED  {insider.saga('control')}" not in every.stdout, every
