"""Log lines that name their saga: a context filter and a one-JSON-object-per-line formatter.

Inside an activity, the worker's interceptor puts the saga id, journal seq, tool, activity type
and attempt into :func:`log_context`; :class:`ContextFilter` copies them onto every record logged
meanwhile (by Sagacity, a tool, or a library the tool calls). Workflow-side lines logged through
``workflow.logger`` carry Temporal's own ``temporal_workflow`` fields, whose workflow id is the
saga id.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

from temporalio import activity, workflow

__all__ = ["ContextFilter", "JsonFormatter", "PayloadFilter", "configure_logging", "log_context"]

#: the fields a record may carry, in the order they are shown
FIELDS = ("saga_id", "seq", "tool", "activity", "attempt", "workflow")

# a mapping that is replaced, never mutated: each log_context sets a new one
_context: ContextVar[Mapping[str, Any]] = ContextVar(
    "sagacity_log_context", default=MappingProxyType({})
)


@contextlib.contextmanager
def log_context(**fields: Any) -> Iterator[None]:
    """Attach ``fields`` (``None`` values dropped) to every record logged inside the block."""
    token = _context.set({**_context.get(), **{k: v for k, v in fields.items() if v is not None}})
    try:
        yield
    finally:
        _context.reset(token)


class ContextFilter(logging.Filter):
    """Copy the current :func:`log_context` (or Temporal's workflow fields) onto each record."""

    def filter(self, record: logging.LogRecord) -> bool:
        for key, value in _context.get().items():
            if not hasattr(record, key):
                setattr(record, key, value)
        workflow = getattr(record, "temporal_workflow", None)
        if isinstance(workflow, dict):
            if not hasattr(record, "saga_id"):
                record.saga_id = workflow.get("workflow_id")
            if not hasattr(record, "workflow"):
                record.workflow = workflow.get("workflow_type")
        return True


class PayloadFilter(logging.Filter):
    """Keep values out of Temporal's DEBUG lines: its SDK logs heartbeat details (in clear),
    activity completions and workflow activations with their payloads. The line stays; each
    argument that is not a plain scalar (an id, a name) shows as its type instead."""

    def filter(self, record: logging.LogRecord) -> bool:
        temporal = record.name.startswith("temporalio")
        if temporal and record.levelno < logging.INFO and isinstance(record.args, tuple):
            record.args = tuple(
                a if isinstance(a, str | int | float | None) else f"<{type(a).__name__}>"
                for a in record.args
            )
        return True


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    return {k: v for k in FIELDS if (v := getattr(record, k, None)) is not None}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time (UTC), level, logger, message, saga fields, exception."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


class TextFormatter(logging.Formatter):
    """The usual one-line text, with ``[saga_id=… seq=…]`` appended when a saga is known."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)s %(name)s %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = _fields(record)
        if not fields:
            return text
        return f"{text} [{' '.join(f'{k}={v}' for k, v in fields.items())}]"


def configure_logging(fmt: Literal["text", "json"], level: int = logging.INFO) -> None:
    """Send every logger's records to stderr, as text or JSON, with the saga context and no
    payload values (:class:`PayloadFilter`)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(ContextFilter())
    handler.addFilter(PayloadFilter())
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers = [handler]
    root.setLevel(level)
    if fmt == "json":
        # the saga fields are JSON fields already: no need to repeat them inside the message
        workflow.logger.workflow_info_on_message = False
        activity.logger.activity_info_on_message = False
