"""An outsider's verifier, written from the docs alone, agrees with ``sagacity verify --all`` and
``sagacity log verify`` on a live journal: clean, and after each of the owner's tamperings.

The set-up is ``sagacity dev``'s (as in test_default_config_tamper.py): a real worker on a real
Temporal server runs Order sagas, one approved by a signed decision and completed, one approved and
compensated when its last call fails, and plain two-step ones; the worker's sequencer and one
``sagacity log integrate`` log them. The independent verifier (tests/evidence/independent_verifier.py,
which imports nothing of Sagacity) reads the journal and the leaf table with plain ``SELECT``s,
the checkpoint folder, and a trust file pinning the worker's public key.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg.rows import dict_row
from temporalio.client import Client

from sagacity.devstack import DevStack, Endpoints
from sagacity.settings import Settings
from sagacity.store.databases import drop_database, ensure_database
from sagacity.temporal.models import SagaResult, SagaState
from sagacity.temporal.workflow import STEPS_WORKFLOW
from sagacity.worker import running_worker
from tests.evidence import independent_verifier as outsider
from tests.evidence.test_default_config_tamper import (
    TWO_STEPS,
    Owner,
    Shell,
    appended_after_end,
    deleted_saga,
    dev_exports,
    forged_saga,
    fresh_clone,
    logged_by_the_worker,
    payload_edit,
    rolled_back,
    truncated_tail,
)
from tests.temporal.conftest import awaiting_approval, wait_for
from workflows.order import shop as order_shop
from workflows.order.workflows import OrderRequest

PLAIN = ("control", "edit", "truncated", "deleted", "appended", "rolledback")


@dataclass
class Live:
    shell: Shell
    owner: Owner
    folder: Path
    trust: outsider.Trust
    sagas: dict[str, str]


async def approve(shell: Shell, client: Client, saga_id: str) -> None:
    """Approve the saga's pending call as a user does, with the CLI (a signed decision)."""
    status = await wait_for(client.get_workflow_handle(saga_id), awaiting_approval)
    assert status.pending_approval is not None
    run = await shell("approvals", "approve", saga_id, str(status.pending_approval.journal_seq))
    assert run.code == 0, run


async def run_sagas(settings: Settings, client: Client, shell: Shell) -> dict[str, str]:
    run = uuid.uuid4().hex[:8]
    sagas = {role: f"outsider-{role}-{run}" for role in ("approved", "compensated", *PLAIN)}
    try:
        before: order_shop.Shop | None = order_shop.current()
    except RuntimeError:  # none yet
        before = None
    try:
        async with running_worker(settings, ["workflows.order.app"], graceful_s=1):
            shop = order_shop.current()

            async def place(role: str) -> SagaResult:
                handle = await client.start_workflow(
                    "order.PlaceOrder",
                    OrderRequest(),
                    id=sagas[role],
                    task_queue=settings.task_queue,
                    result_type=SagaResult,
                )
                await approve(shell, client, sagas[role])
                result: SagaResult = await handle.result()
                return result

            approved = await place("approved")
            assert approved.status is SagaState.COMPLETED, approved
            await shop.arm_fault("send_confirmation", "mail relay refused the message")
            compensated = await place("compensated")
            assert compensated.status is SagaState.COMPENSATED, compensated
            plain = await asyncio.gather(
                *(
                    client.execute_workflow(
                        STEPS_WORKFLOW,
                        TWO_STEPS,
                        id=sagas[role],
                        task_queue=settings.task_queue,
                        result_type=SagaResult,
                    )
                    for role in PLAIN
                )
            )
            assert all(r.status is SagaState.COMPLETED for r in plain), plain
            await logged_by_the_worker(settings, 8 + 10 + 4 * len(PLAIN))
    finally:
        if before is not None:
            order_shop.use(before)
    return sagas


@pytest.fixture(scope="module")
async def live(
    endpoints: Endpoints,
    settings: Settings,
    temporal_client: Client,
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[Live]:
    name = f"sagacity_outsider_{uuid.uuid4().hex[:10]}"
    owner_url = await ensure_database(endpoints.database_url, name)
    try:
        fresh = fresh_clone(settings, owner_url, tmp_path_factory.mktemp("outsider"))
        setup = await DevStack(fresh, postgres=False, temporal=False).prepare()
        exports = dev_exports(endpoints, setup)
        shell = Shell(exports)
        worker_settings = fresh.model_copy(
            update={
                **setup.settings(),
                "temporal_address": endpoints.temporal_address,
                "temporal_namespace": endpoints.temporal_namespace,
                "task_queue": f"tq-{uuid.uuid4()}",
                "log_interval": timedelta(seconds=0.5),
            }
        )
        shell.exports["SAGACITY_TASK_QUEUE"] = str(worker_settings.task_queue)
        sagas = await run_sagas(worker_settings, temporal_client, shell)
        integrated = await shell("log", "integrate")
        assert integrated.code == 0, integrated
        folder = Path(exports["SAGACITY_CHECKPOINT_DIR"])
        # the trust file `sagacity dev` wrote, read by the outsider's own code
        trust = outsider.load_trust(Path(exports["SAGACITY_TRUST_FILE"]))
        yield Live(shell, Owner(owner_url), folder, trust, sagas)
    finally:
        await drop_database(endpoints.database_url, name)


# --------------------------------------------------------------------------------------------------
# What each verifier says, reduced to what they must agree on


@dataclass(frozen=True)
class Verdicts:
    #: failing saga -> the first seq its faults name (None: none names one)
    sagas: dict[str, int | None]
    #: the log's findings about rows: (saga, seq, fatal)
    rows: frozenset[tuple[str, int, bool]]
    #: whether the log's heads or leaf table failed as a whole
    heads_fail: bool


async def sagacity_says(live: Live) -> Verdicts:
    run = await live.shell("verify", "--all", "--json")
    assert run.code in (0, 1), run
    sagas: dict[str, int | None] = {}
    for text in run.stdout.splitlines():
        report = json.loads(text)
        if "summary" in report or report["ok"]:
            continue
        named = [] if report["problem"] is None else [report["problem"]["seq"]]
        named += [a["seq"] for a in report["anchors"] if a["fatal"] and a["seq"] is not None]
        sagas[report["saga_id"]] = named[0] if named else None
    log = await live.shell("log", "verify", "--json")
    assert log.code in (0, 1), log
    rows, heads_fail = set(), False
    for text in log.stdout.splitlines():
        finding = json.loads(text)
        if "summary" in finding:
            continue
        if finding["saga_id"] is None:
            heads_fail |= finding["fatal"]
        else:
            rows.add((finding["saga_id"], finding["seq"], finding["fatal"]))
    return Verdicts(sagas, frozenset(rows), heads_fail)


async def outsider_says(live: Live) -> Verdicts:
    async with await psycopg.AsyncConnection.connect(live.owner.url, row_factory=dict_row) as conn:
        journal: list[dict[str, Any]] = await (
            await conn.execute(outsider.SELECT_JOURNAL)
        ).fetchall()
        leaves: list[dict[str, Any]] = await (await conn.execute(outsider.SELECT_LEAVES)).fetchall()
    found = outsider.verify_log(journal, leaves, live.folder, live.trust)
    # the log has a published head here: verify --all checks each saga against it too
    report = outsider.verify_all(journal, live.folder, live.trust, found)
    sagas = {}
    for saga_id, findings in report.items():
        if findings:
            named = [f.seq for f in findings if f.seq is not None]
            sagas[saga_id] = named[0] if named else None
    rows = frozenset(
        (f.saga_id, f.seq, f.fatal) for f in found if f.saga_id is not None and f.seq is not None
    )
    return Verdicts(sagas, rows, any(f.fatal for f in found if f.saga_id is None))


async def test_both_verifiers_pass_the_untouched_journal(live: Live) -> None:
    ours, theirs = await sagacity_says(live), await outsider_says(live)
    assert ours == theirs == Verdicts({}, frozenset(), False)


TAMPERINGS = {
    "payload edited, later hashes recomputed": ("edit", payload_edit),
    "tail cut": ("truncated", truncated_tail),
    "saga deleted": ("deleted", deleted_saga),
    "saga forged": (None, forged_saga),
    "row appended after the end": ("appended", appended_after_end),
}


async def test_both_verifiers_agree_after_each_tampering(live: Live) -> None:
    """Each tampering adds to the ones before; after each, both name the same failing sagas,
    the same first seq of each, and the same rows of the log."""
    expected_failures: set[str] = set()
    for case, (role, attack) in TAMPERINGS.items():
        saga_id = live.sagas[role] if role else f"outsider-forged-{uuid.uuid4().hex[:8]}"
        await attack(live.owner, saga_id)
        expected_failures.add(saga_id)
        ours, theirs = await sagacity_says(live), await outsider_says(live)
        assert set(ours.sagas) == expected_failures, (case, ours)
        assert theirs == ours, case
    # the anchors folder too: one saga's checkpoint file rolled back, its tail rewritten; the
    # log's leaves name the first rewritten row
    saga_id = live.sagas["rolledback"]
    await rolled_back(live.owner, live.folder / f"{saga_id}.jsonl", saga_id)
    expected_failures.add(saga_id)
    ours, theirs = await sagacity_says(live), await outsider_says(live)
    assert set(ours.sagas) == expected_failures, ours
    assert ours.sagas[saga_id] == 3 and theirs == ours
    # the untouched sagas, the approved and the compensated one among them, still verify
    assert live.sagas["approved"] not in ours.sagas and live.sagas["compensated"] not in ours.sagas
    assert ours.rows, "the log named no row"


def first_seq(text: str) -> int | None:
    found = re.search(r"\bseq (\d+)", text)
    return None if found is None else int(found.group(1))


async def test_both_verifiers_agree_on_a_proof_bundle(live: Live, tmp_path: Path) -> None:
    """``sagacity prove`` of the approved saga: both accept it; with row 6's payload edited and
    its hash recomputed, or the inclusion path of row 3 cut short, both refuse it at that seq."""
    saga_id = live.sagas["approved"]
    bundle = tmp_path / "proof"
    made = await live.shell("prove", saga_id, "--out", str(bundle))
    assert made.code == 0, made
    key = str(live.folder.parent / "signing-key.pem.pub")  # the dev stack's public half

    async def both() -> tuple[tuple[bool, int | None], tuple[bool, int | None]]:
        run = await live.shell("prove", "--check", str(bundle), "--public-key", key)
        assert run.code in (0, 1), run
        found = outsider.check_proof(bundle, live.trust)
        named = [f.seq for f in found if f.seq is not None]
        return (run.code == 0, first_seq(run.stdout + run.stderr) if run.code else None), (
            not found,
            named[0] if named else None,
        )

    ours, theirs = await both()
    assert ours == theirs == (True, None)

    rows = (bundle / "rows.jsonl").read_text(encoding="utf-8").splitlines()
    original = rows[5]
    row = json.loads(original)
    assert row["phase"] == "APPROVED"
    row["payload"] = row["payload"].replace('"decision":"approve"', '"decision":"approve" ')
    row["hash"] = outsider.row_hash(json.loads(rows[4])["hash"], row)
    rows[5] = json.dumps(row, ensure_ascii=False)
    (bundle / "rows.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    ours, theirs = await both()
    assert ours == theirs == (False, 6), (ours, theirs)

    rows[5] = original
    (bundle / "rows.jsonl").write_text("\n".join(rows) + "\n", encoding="utf-8")
    proofs = (bundle / "proofs.jsonl").read_text(encoding="utf-8").splitlines()
    proof = json.loads(proofs[2])
    proof["hashes"] = proof["hashes"][:-1]
    proofs[2] = json.dumps(proof)
    (bundle / "proofs.jsonl").write_text("\n".join(proofs) + "\n", encoding="utf-8")
    ours, theirs = await both()
    assert ours == theirs == (False, 3), (ours, theirs)
