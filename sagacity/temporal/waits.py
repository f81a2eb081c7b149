"""How long workflow code waits and how it retries: the saga's and the rollback workflow's alike.

Activities wait out a database outage inside themselves (``ActivityState.outage_window``, 10
minutes by default); the time limits here leave room for it, and a dead worker is noticed by
heartbeats, not by these limits.
"""

from __future__ import annotations

from datetime import timedelta

from temporalio.common import RetryPolicy

from sagacity.temporal.models import SagaOptions

#: added to a tool's or an undo's own time limit: the outage its activity may wait out
OUTAGE_ALLOWANCE = timedelta(minutes=15)
JOURNAL_TIMEOUT = OUTAGE_ALLOWANCE
#: a journal activity's worker that died is noticed within this, and the activity tried again
#: on another: without it, only :data:`JOURNAL_TIMEOUT` would end the dead attempt
JOURNAL_HEARTBEAT = timedelta(seconds=30)
#: journal writes wait out a database outage rather than drop a row
JOURNAL_RETRY = RetryPolicy(
    initial_interval=timedelta(seconds=1), maximum_interval=timedelta(seconds=10)
)
#: a halt the workflow waits on is looked at again after this, doubling up to the cap (a lost
#: ``resume`` signal only delays it)
HALT_RECHECK = timedelta(seconds=30)
#: one look costs about a dozen history events: hourly, a held saga's history lasts half a year
HALT_RECHECK_MAX = timedelta(hours=1)


def compensation_retry(options: SagaOptions) -> RetryPolicy:
    """How one compensation is retried before COMPENSATION_FAILED: ``options``' attempts, their
    backoff doubling up to its cap."""
    return RetryPolicy(
        initial_interval=timedelta(seconds=options.compensation_backoff_s),
        backoff_coefficient=2.0,
        maximum_interval=timedelta(seconds=options.compensation_max_interval_s),
        maximum_attempts=options.compensation_attempts,
    )
