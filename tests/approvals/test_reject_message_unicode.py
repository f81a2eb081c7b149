"""A rejection message in the Unicode people type and paste (decomposed accents, a line
separator, a ZWJ emoji, a bidi override, C1 controls past the ASCII ones refused) survives its
route byte for byte: the saga's result, the signed REJECTED row, ``sagacity saga status``, and
``sagacity verify`` live and from a bundle (real Temporal, Postgres, keyring on)."""

from __future__ import annotations

import unicodedata

from temporalio.client import Client

from sagacity.journal import Phase
from sagacity.store import JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals import test_decisions_bound, test_signed
from tests.approvals.conftest import Cli
from tests.approvals.test_decisions_bound import Verifier
from tests.approvals.test_reject_message import rejected_row, waiting
from tests.approvals.test_signed import Keys
from tests.temporal.test_crash import WorkerProcess

keys = test_signed.keys
signed_worker = test_signed.signed_worker
anchors = test_decisions_bound.anchors
verifier = test_decisions_bound.verifier

MESSAGE = "Re\u0301sume\u0301 first\u2028then\n\tretry 🧑\u200d💻 \u202eodrer\u202c \x7f\u0085 ﬁn"


async def test_a_unicode_rejection_message_is_kept_byte_for_byte_and_verifies(
    signed_worker: WorkerProcess,
    temporal_client: Client,
    task_queue: str,
    keys: Keys,
    cli: Cli,
    journal: JournalStore,
    verifier: Verifier,
) -> None:
    assert unicodedata.normalize("NFC", MESSAGE) != MESSAGE  # a normalizer would change it
    handle, seq = await waiting(temporal_client, task_queue)
    said = await cli(
        "approvals", "reject", handle.id, str(seq), "--reason", "n\u0303o",
        "--message", MESSAGE, "--json", extra_env=keys.env(),
    )  # fmt: skip
    assert said.code == 0, said.stderr
    assert said.json()["message"] == MESSAGE
    result = await handle.result()
    assert result.status is SagaState.COMPENSATED
    assert result.error is not None and result.error.rejection is not None
    assert result.error.rejection.message == MESSAGE
    at, body = await rejected_row(journal, handle.id)
    assert at == seq + 1 and body["message"] == MESSAGE and body["reason"] == "n\u0303o"
    rows = {e.seq: e for e in await journal.read(handle.id)}
    assert rows[at].phase is Phase.REJECTED
    shown = await cli("saga", "status", handle.id, "--json")
    assert shown.json()["error"]["rejection"]["message"] == MESSAGE
    plain = await cli("saga", "status", handle.id)  # exit 1: the saga did not complete
    assert f"message from alice: {MESSAGE}" in plain.stdout, plain.stdout + plain.stderr
    live, told, offline, told_offline = await verifier.both(handle.id)
    assert (live, offline) == (0, 0), told + told_offline
