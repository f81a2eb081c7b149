"""OpenTelemetry tracing of sagas, on when ``SAGACITY_OTEL=1``.

Spans come from Temporal's ``TracingInterceptor`` (client and worker: starting a saga, each
workflow run and activity) and go over OTLP/HTTP to the collector the standard
``OTEL_EXPORTER_OTLP_ENDPOINT`` names (default ``http://localhost:4318``). Needs the ``otel``
extra: ``pip install 'sagacity[otel]'``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from temporalio.client import Interceptor as ClientInterceptor

from sagacity.errors import SettingsError
from sagacity.settings import Settings

__all__ = ["tracing"]


@contextlib.contextmanager
def tracing(settings: Settings, service: str) -> Iterator[list[ClientInterceptor]]:
    """The client interceptors that trace (none when off); spans are flushed on exit."""
    if not settings.otel:
        yield []
        return
    try:
        from opentelemetry import trace
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor
        from temporalio.contrib.opentelemetry import TracingInterceptor
    except ImportError as exc:
        raise SettingsError(
            f"SAGACITY_OTEL: tracing needs the otel extra (pip install 'sagacity[otel]'): {exc}"
        ) from None
    name = os.environ.get("OTEL_SERVICE_NAME", service)
    provider = TracerProvider(resource=Resource.create({"service.name": name}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    try:
        yield [TracingInterceptor()]
    finally:
        # CLI commands leave through os._exit, which skips OpenTelemetry's own atexit flush
        provider.shutdown()
