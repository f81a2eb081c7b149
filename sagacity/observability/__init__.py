"""Observability of workers: Prometheus metrics, health probes, saga-tagged logs, tracing."""

from sagacity.observability.http import ProbeServer
from sagacity.observability.interceptor import ObservabilityInterceptor
from sagacity.observability.logs import PayloadFilter, configure_logging, log_context
from sagacity.observability.metrics import TimedJournalStore, temporal_runtime
from sagacity.observability.tracing import tracing

__all__ = [
    "ObservabilityInterceptor",
    "PayloadFilter",
    "ProbeServer",
    "TimedJournalStore",
    "configure_logging",
    "log_context",
    "temporal_runtime",
    "tracing",
]
