"""``sagacity saga status`` tells a compensation that keeps failing from a slow one: while the
undo retries it shows the attempt and the last error, and ``--wait`` exits 4 with a one-line
reason once the undo has failed 3 attempts, instead of waiting for the retries to run out. The
console's saga page and the HTTP API's saga view show the same."""

from __future__ import annotations

import json
import re

import httpx
from temporalio.client import Client

from sagacity.store import ApprovalStore, JournalStore
from sagacity.temporal.models import SagaState
from tests.approvals.conftest import Cli
from tests.approvals.test_console import sign_in, web
from tests.temporal import test_compensation_permanent as trips

__all__ = ["web"]


async def test_status_wait_exits_4_naming_the_undo_that_keeps_failing(
    temporal_client: Client,
    task_queue: str,
    journal: JournalStore,
    approvals: ApprovalStore,
    cli: Cli,
    web: httpx.AsyncClient,
) -> None:
    trips.UNDONE.clear()
    trips.HOTEL_UNDO.update(mode="transient", failures=10_000)  # fails for ever
    async with trips.serving_undos(temporal_client, task_queue, journal, approvals) as worker:
        # enough attempts that the retries would outlast any wait: only a verdict ends it
        spec = trips.trip(hotel_fails=False, attempts=1000, backoff_s=0.2)
        handle = await trips.start_trip(temporal_client, worker, spec)
        try:
            waited = await cli("saga", "status", handle.id, "--wait")
            assert waited.code == 4, (waited.code, waited.stdout, waited.stderr)
            reason = waited.stderr.strip().splitlines()[-1]
            assert reason.startswith(
                f"saga {handle.id}: the compensation of book_hotel (call seq 5) has failed "
            ), reason
            assert "attempts and is retried (attempt " in reason
            assert "; last error: ConnectionError: hotel API unreachable (attempt " in reason
            assert "compensating: book_hotel (seq 5), attempt " in waited.stdout

            shown = await cli("saga", "status", handle.id, "--json")
            assert shown.code == 4, shown.stderr
            status = json.loads(shown.stdout)
            assert status["state"] == SagaState.COMPENSATING.value
            undoing = status["compensating"]
            assert (undoing["tool_name"], undoing["call_seq"]) == ("book_hotel", 5)
            assert undoing["attempt"] >= 4
            assert undoing["last_error"].startswith("ConnectionError: hotel API unreachable")

            api = await web.get(f"/sagas/{handle.id}", headers={"Authorization": "Bearer tok-bob"})
            view = api.json()
            assert view["compensation_failing"] is True, view
            assert view["compensating"]["tool_name"] == "book_hotel"
            assert view["compensating"]["attempt"] >= 4
            await sign_in(web, "tok-alice")
            page = (await web.get(f"/console/sagas/{handle.id}")).text
            shown_on_page = re.search(r'<dd data-testid="compensating" class="bad">([^<]*)', page)
            assert shown_on_page is not None, page
            assert shown_on_page[1].startswith("book_hotel (seq 5), attempt ")
            assert "last error: ConnectionError: hotel API unreachable" in shown_on_page[1]
        finally:
            await handle.terminate("test over")
