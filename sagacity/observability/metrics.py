"""Sagacity's own Prometheus metrics, and the Temporal SDK's runtime metrics beside them.

Sagacity's counters live in ``prometheus_client``'s default registry (with the process metrics
it ships). The Temporal SDK's runtime metrics come from its Rust core, which serves them itself:
:func:`temporal_runtime` binds that exporter to a private loopback port, and the worker's HTTP
endpoint (:mod:`sagacity.observability.http`) serves both as one ``/metrics`` page.
"""

from __future__ import annotations

import socket
from collections.abc import Sequence
from datetime import datetime

from prometheus_client import Counter, Gauge, Histogram, disable_created_metrics
from temporalio.runtime import PrometheusConfig, Runtime, TelemetryConfig

from sagacity.journal import Draft, Entry
from sagacity.store.journal import JournalStore, UndoClaim

__all__ = [
    "APPROVALS_WAITING",
    "COMPENSATIONS",
    "COMPENSATION_ATTEMPTS_FAILED",
    "COMPENSATION_FAILED_ATTEMPT",
    "JOURNAL_APPEND_SECONDS",
    "SAGAS_ENDED",
    "SAGAS_STARTED",
    "TOOL_CALLS",
    "TimedJournalStore",
    "temporal_runtime",
]

# `*_created` series double the page and tell a scraper nothing it needs here
disable_created_metrics()  # type: ignore[no-untyped-call]

SAGAS_STARTED = Counter(
    "sagacity_sagas_started", "Sagas this worker started running.", ["workflow"]
)
SAGAS_ENDED = Counter(
    "sagacity_sagas_ended",
    "Sagas that ended on this worker, by outcome (completed, compensated, aborted, "
    "compensation_failed, failed).",
    ["workflow", "outcome"],
)
TOOL_CALLS = Counter(
    "sagacity_tool_calls",
    "Tool calls finished, by tool and the phase journaled (EXECUTED, FAILED, REJECTED).",
    ["tool", "phase"],
)
COMPENSATIONS = Counter(
    "sagacity_compensations",
    "Compensations, by tool and outcome (compensated, failed: retries exhausted, effect live).",
    ["tool", "outcome"],
)
COMPENSATION_ATTEMPTS_FAILED = Counter(
    "sagacity_compensation_attempts_failed",
    "Failed attempts at compensations, by tool, error type and whether the attempt is retried "
    "(false: the error is permanent or the retries ran out, and COMPENSATION_FAILED follows).",
    ["tool", "error", "retried"],
)
COMPENSATION_FAILED_ATTEMPT = Gauge(
    "sagacity_compensation_failed_attempt",
    "The attempt on which this worker's latest compensation of the tool failed (3 or more: it "
    "keeps failing, not slow); 0 once one succeeds.",
    ["tool"],
)
APPROVALS_WAITING = Gauge(
    "sagacity_approvals_waiting",
    "Approval requests awaiting a human decision, across all workers (read at scrape).",
)
JOURNAL_APPEND_SECONDS = Histogram(
    "sagacity_journal_append_seconds",
    "Time to append rows to the journal in Postgres (one call, one or more rows).",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0),
)


class TimedJournalStore(JournalStore):
    """The journal store, timing every append into ``sagacity_journal_append_seconds``.

    ``append_at`` is one ``append_batch_at``, so timing these and ``append_claimed`` (a
    compensation's row) covers every write.
    """

    async def append_claimed(
        self, claim: UndoClaim, draft: Draft, *, seq: int, prev_hash: str
    ) -> Entry:
        with JOURNAL_APPEND_SECONDS.time():
            return await super().append_claimed(claim, draft, seq=seq, prev_hash=prev_hash)

    async def append(self, draft: Draft) -> Entry:
        with JOURNAL_APPEND_SECONDS.time():
            return await super().append(draft)

    async def append_batch_at(
        self,
        drafts: Sequence[Draft],
        *,
        seq: int,
        prev_hash: str | None = None,
        exclusive: bool = False,
        task_queue: str | None = None,
        timestamp: datetime | None = None,
    ) -> list[Entry]:
        with JOURNAL_APPEND_SECONDS.time():
            return await super().append_batch_at(
                drafts,
                seq=seq,
                prev_hash=prev_hash,
                exclusive=exclusive,
                task_queue=task_queue,
                timestamp=timestamp,
            )


def _free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def temporal_runtime() -> tuple[Runtime, str]:
    """A Temporal runtime exporting its metrics on a private loopback port; and that address."""
    address = f"127.0.0.1:{_free_loopback_port()}"
    runtime = Runtime(
        telemetry=TelemetryConfig(
            metrics=PrometheusConfig(
                bind_address=address, counters_total_suffix=True, durations_as_seconds=True
            )
        )
    )
    return runtime, address
