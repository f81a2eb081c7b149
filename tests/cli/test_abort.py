"""Aborts are journaled as aborts, with who sent them: through ``sagacity saga abort`` (signed
with the operator's key when one is configured) and through the plain ``temporal`` CLI with the
payload docs/signals.md gives, against real Temporal and Postgres."""

from __future__ import annotations

import base64
import getpass
import json
from pathlib import Path
from typing import Any

from temporalio.client import Client

from sagacity.devstack import Endpoints
from sagacity.evidence.decisions import Signer, Statement, message
from sagacity.journal import APPROVAL_GATE, Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import Cli, StartOrder
from tests.approvals.test_signed import Keys, temporal
from tests.approvals.test_signed import start_order as start_signed

SIGNALS_DOC = Path(__file__).resolve().parents[2] / "docs" / "signals.md"


def documented_example(signal: str) -> Any:
    """The example payload docs/signals.md gives for ``signal`` (its table's third column)."""
    rows = SIGNALS_DOC.read_text(encoding="utf-8").splitlines()
    row = next(line for line in rows if line.startswith(f"| `{signal}` |"))
    return json.loads(row.split(" | ")[2].strip("`"))


async def abort_row(journal: JournalStore, saga_id: str, request_seq: int) -> dict[str, object]:
    """The payload of the row the abort wrote after the approval request at ``request_seq``."""
    row = (await journal.read(saga_id))[request_seq]  # seq request_seq + 1, zero-based
    assert (row.tool_name, row.phase) == (APPROVAL_GATE, Phase.REJECTED)
    payload: dict[str, object] = json.loads(row.payload)
    return payload


async def test_cli_abort_while_awaiting_approval_is_journaled_as_an_abort_by_the_user(
    start_order: StartOrder, cli: Cli, journal: JournalStore
) -> None:
    waiting = await start_order()
    sent = await cli("saga", "abort", waiting.saga_id, "--reason", "customer called")
    assert sent.code == 0, sent.stderr
    assert (await waiting.handle.result()).status is SagaState.ABORTED
    assert await abort_row(journal, waiting.saga_id, waiting.seq) == {
        "abort": True,
        "by": getpass.getuser(),  # no key configured: the login, as before
        "reason": "aborted: customer called",
    }
    assert (await journal.verify(waiting.saga_id)).ok


async def test_signed_abort_names_the_verified_principal_and_an_unsigned_one_is_unverified(
    signed_worker: object,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
    endpoints: Endpoints,
) -> None:
    # through the CLI, signed with alice's key: the journal names alice, proven
    handle, waiting = await start_signed(temporal_client, task_queue)
    assert waiting.pending_approval is not None
    sent = await cli(
        "saga", "abort", handle.id, "--reason", "customer called", extra_env=keys.env()
    )  # fmt: skip
    assert sent.code == 0, sent.stderr
    assert "by alice (signed)" in sent.stderr
    assert (await handle.result()).status is SagaState.ABORTED
    # the row carries the whole signature, so the abort can be checked offline
    row = await abort_row(journal, handle.id, waiting.pending_approval.journal_seq)
    signature = {k: str(row.pop(k)) for k in ("signature", "signed_at")}
    assert row == {
        "abort": True,
        "by": "alice",
        "decision": "abort",
        "input_hash": "",
        "key_id": Signer.open(keys.alice).key_id,
        "reason": "customer called",
        "signer": "alice",
    }
    assert (
        Signer.open(keys.alice)
        .key.public_key()
        .verify(
            base64.b64decode(signature["signature"]),
            message(
                Statement(handle.id, 0, "", "abort", "alice", "customer called"),
                signed_at=signature["signed_at"],
                key=Signer.open(keys.alice).key_id,
            ),
        )
        is None
    )
    # the journal's decision rows still verify against the keyring
    verified = await cli("verify", handle.id, extra_env=keys.env())
    assert verified.code == 0, verified.stdout + verified.stderr

    # signed, but by a key the keyring does not trust for alice: taken, but unverified
    handle, waiting = await start_signed(temporal_client, task_queue)
    assert waiting.pending_approval is not None
    forged = await cli(
        "saga", "abort", handle.id, "--reason", "customer called", "--by", "alice",
        extra_env=keys.env(keys.mallory),
    )  # fmt: skip
    assert forged.code == 0, forged.stderr
    assert (await handle.result()).status is SagaState.ABORTED
    row = await abort_row(journal, handle.id, waiting.pending_approval.journal_seq)
    assert (row["abort"], row["by"]) == (True, "unverified:alice") and "key_id" not in row

    # through the plain temporal CLI, the payload of docs/signals.md: taken, but unverified
    handle, waiting = await start_signed(temporal_client, task_queue)
    assert waiting.pending_approval is not None
    payload = documented_example("abort")
    assert payload == {"reason": "customer called", "by": "ops-oncall"}
    signal = await temporal(
        endpoints, "workflow", "signal", "--workflow-id", handle.id, "--name", "abort",
        "--input", json.dumps(payload),
    )  # fmt: skip
    assert signal.code == 0, signal.stderr
    assert (await handle.result()).status is SagaState.ABORTED
    assert await abort_row(journal, handle.id, waiting.pending_approval.journal_seq) == {
        "abort": True,
        "by": "unverified:ops-oncall",
        "reason": "aborted: customer called",
    }
