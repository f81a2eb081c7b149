"""Fuzz the approvals HTTP API from its committed OpenAPI document, with schemathesis (long profile).

``SAGACITY_FUZZ=1`` runs it (``SAGACITY_FUZZ=1 make test ARGS=tests/approvals/test_fuzz.py``);
otherwise it skips. ``SAGACITY_FUZZ_SEED`` replays a run (the test prints the seed it used) and
``SAGACITY_FUZZ_EXAMPLES`` sets how many requests each operation gets per generation mode.

The app is the real one (:func:`~sagacity.approvals.http.create_app` over an
:class:`~sagacity.approvals.ApprovalService`, with the codec server's routes) on a real port, over
the session's Temporal server, a worker, and Postgres. Schemathesis generates requests from
``docs/approvals-openapi.json``, valid and invalid, for every operation; some are aimed at sagas
that really wait for approval (a fresh one replaces each one decided) or that were decided, so
paths hit real rows, and approvals among those carry the request's input hash or a wrong one. The
checks:

* no request is answered 5xx (or not answered);
* no request changes stored state, except an accepted decision: the journal's rows and highest seq
  of every saga, and every approval request row, are the same after it as before. After an
  accepted decision, the test waits until its saga has ended before the next request.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections import Counter
from collections.abc import Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from temporalio.client import Client, WorkflowExecutionStatus
from temporalio.worker import Worker

from sagacity.approvals import ApprovalService
from sagacity.approvals.codec_server import CodecServer
from sagacity.approvals.http import create_app
from sagacity.store import ApprovalStore, Pool
from tests.approvals.conftest import StartOrder, Waiting
from tests.approvals.openapi_operations import loaded_operations
from tests.serving import serve
from workflows.order.shop import Shop

OPENAPI = Path(__file__).parents[2] / "docs" / "approvals-openapi.json"

FUZZ = os.environ.get("SAGACITY_FUZZ", "")
if FUZZ not in ("", "0", "1"):
    raise pytest.UsageError(f"SAGACITY_FUZZ={FUZZ!r}: expected 1 (fuzz) or 0 (skip)")
pytestmark = pytest.mark.skipif(
    FUZZ != "1", reason="long profile: SAGACITY_FUZZ=1 fuzzes the approvals API"
)

#: alice may decide send_confirmation and decode payloads; bob holds a token and may do neither
TOKENS = {"tok-alice": "alice", "tok-bob": "bob"}
#: whose credentials a request carries, drawn per request: mostly the one that may do everything
WHO = ("alice",) * 6 + ("bob", "nobody", "no-token")
#: where a request's path parameters point, drawn per request
TARGETS = ("generated", "generated", "waiting", "decided")
#: what an approval aimed at a real request carries, drawn per request
BODIES = ("as generated", "as generated", "right hash", "wrong hash")
#: sagas kept waiting at their gate at all times
WAITING = 2
DECISIONS = ("approve", "reject", "resolve")

T = TypeVar("T")

Snapshot = tuple[dict[str, tuple[int, int]], frozenset[tuple[Any, ...]]]


async def snapshot(pool: Pool) -> Snapshot:
    """(saga id -> (journal rows, highest seq)), and every approval request row as it is stored."""
    async with pool.connection() as conn:
        journal = await conn.execute(
            "SELECT saga_id, count(*), max(seq) FROM side_effect_journal GROUP BY saga_id"
        )
        per_saga = {row[0]: (int(row[1]), int(row[2])) for row in await journal.fetchall()}
        requests = await conn.execute("SELECT * FROM sagacity_approval_request")
        stored = frozenset(tuple(row) for row in await requests.fetchall())
    return per_saga, stored


def difference(before: Snapshot, after: Snapshot) -> str:
    journal = {
        saga: (before[0].get(saga), after[0].get(saga))
        for saga in before[0].keys() | after[0].keys()
        if before[0].get(saga) != after[0].get(saga)
    }
    gone, new = before[1] - after[1], after[1] - before[1]
    return f"journal (rows, max seq) before -> after: {journal}; requests gone {gone}, new {new}"


async def test_the_approvals_api_answers_every_generated_request_without_5xx_or_side_effects(
    temporal_client: Client,
    worker: Worker,
    approvals: ApprovalStore,
    pool: Pool,
    start_order: StartOrder,
    shop: Shop,
) -> None:
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, seed, settings
    from hypothesis import strategies as st
    from hypothesis.errors import Unsatisfiable
    from schemathesis import Case, GenerationMode

    run_seed = int(os.environ.get("SAGACITY_FUZZ_SEED") or random.randrange(2**32))
    examples = int(os.environ.get("SAGACITY_FUZZ_EXAMPLES") or 100)
    print(f"fuzz seed: SAGACITY_FUZZ_SEED={run_seed}")

    codec = temporal_client.data_converter.payload_codec
    assert codec is not None, "the test session runs with the codec on"
    service = ApprovalService(
        temporal_client, approvals, approvers={"send_confirmation": ["alice"]}
    )
    app = create_app(service, TOKENS, codec=CodecServer(codec, decoders=frozenset({"alice"})))

    waiting: list[Waiting] = [await start_order() for _ in range(WAITING)]
    decided: list[Waiting] = []
    loop = asyncio.get_running_loop()

    def on_loop(coroutine: Coroutine[Any, Any, T]) -> T:
        """Run ``coroutine`` in the test's event loop (Temporal, Postgres) from the fuzz thread."""
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result(timeout=120)

    async def settle(saga_id: str) -> None:
        """Wait until the saga a decision was accepted for has ended; keep WAITING sagas waiting."""
        handle = temporal_client.get_workflow_handle(saga_id)
        for _ in range(600):
            if (await handle.describe()).status is not WorkflowExecutionStatus.RUNNING:
                break
            await asyncio.sleep(0.1)
        else:
            raise TimeoutError(f"{saga_id} did not end after its decision")
        for saga in [s for s in waiting if s.saga_id == saga_id]:
            waiting.remove(saga)
            decided.append(saga)
        # stock for the orders that replace it: each approved order keeps what it took
        async with shop.pool.connection() as conn:
            await conn.execute(
                "UPDATE inventory SET available = available + 10 WHERE product_id = 'p-1'"
            )
        while len(waiting) < WAITING:
            waiting.append(await start_order())

    schema = schemathesis.openapi.from_path(OPENAPI)
    operations = loaded_operations(schema)
    answered: Counter[tuple[str, int]] = Counter()
    findings: list[str] = []
    unsatisfiable: list[str] = []

    def aim(case: Case[Any], target: str, pick: int, body: str) -> None:
        """Point the case's path at a waiting or a decided saga's request (or leave it), and an
        approval's body at the request's input hash or another one (or leave it)."""
        pool_ = waiting if target == "waiting" else decided
        if target == "generated" or not pool_ or "saga_id" not in case.path_parameters:
            return
        saga = pool_[pick % len(pool_)]
        case.path_parameters["saga_id"] = saga.saga_id
        if "seq" in case.path_parameters:
            case.path_parameters["seq"] = saga.seq
        if case.path.endswith("/approve") and body != "as generated":
            assert saga.status.pending_approval is not None
            right = saga.status.pending_approval.input_hash
            case.body = {"input_hash": right if body == "right hash" else f"{right[:-4]}beef"}

    def probe(case: Case[Any], target: str, who: str, pick: int, body: str, base_url: str) -> None:
        aim(case, target, pick, body)
        headers = {}
        if who == "nobody":
            headers["Authorization"] = "Bearer not-a-token"
        elif who != "no-token":
            headers["Authorization"] = f"Bearer tok-{who}"
        before = on_loop(snapshot(pool))
        label = case.operation.label
        try:
            response = case.call(base_url=base_url, headers=headers, timeout=60)
        except Exception as exc:
            findings.append(
                f"{label}: no answer ({exc!r})\n{case.as_curl_command(headers=headers)}"
            )
            return
        status = response.status_code
        answered[(label, status)] += 1
        if status >= 500:
            findings.append(
                f"{label}: {status} {response.text[:500]}\n{case.as_curl_command(headers=headers)}"
            )
        decision = case.method.upper() == "POST" and case.path.rsplit("/", 1)[-1] in DECISIONS
        if decision and 200 <= status < 300:
            on_loop(settle(str(case.path_parameters["saga_id"])))
            return
        after = on_loop(snapshot(pool))
        if after != before:
            findings.append(
                f"{label}: answered {status} yet changed state: {difference(before, after)}\n"
                f"{case.as_curl_command(headers=headers)}"
            )

    def fuzz(base_url: str) -> None:
        for operation in operations:
            for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

                @seed(run_seed)
                @settings(
                    max_examples=examples,
                    deadline=None,
                    database=None,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=list(HealthCheck),
                )
                @given(
                    case=operation.as_strategy(generation_mode=mode),
                    target=st.sampled_from(TARGETS),
                    who=st.sampled_from(WHO),
                    pick=st.integers(0, 7),
                    body=st.sampled_from(BODIES),
                )
                def run(case: Case[Any], target: str, who: str, pick: int, body: str) -> None:
                    probe(case, target, who, pick, body, base_url)

                try:
                    run()
                except Unsatisfiable:
                    unsatisfiable.append(f"{operation.label} ({mode.value})")

    async with serve(app) as url:
        await asyncio.to_thread(fuzz, url)

    total = sum(answered.values())
    by_status = Counter[int]()
    for (_, status), count in answered.items():
        by_status[status] += count
    print(f"fuzz: {total} requests over {len(operations)} operations; by status {dict(by_status)}")
    for (label, status), count in sorted(answered.items()):
        print(f"  {label}: {status} x{count}")
    print(f"  decisions taken: {len(decided)}; nothing generated for: {unsatisfiable or 'none'}")
    assert not findings, f"{len(findings)} findings:\n\n" + "\n\n".join(findings[:20])
    assert total >= len(operations) * examples // 2, "the fuzz sent fewer requests than planned"
