"""Escalating an approval request past its SLA: one chat-webhook POST, claimed in the store."""

from __future__ import annotations

import logging
import shlex
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import quote, urlsplit

import httpx
from temporalio import activity
from temporalio.exceptions import ApplicationError

from sagacity.temporal.activities.state import ActivityState
from sagacity.temporal.activities.typed import typed
from sagacity.temporal.models import Escalate, Escalated, EscalationOutcome
from sagacity.temporal.names import ESCALATE_APPROVAL

__all__ = ["CONSOLE_REQUEST_PATH", "EscalationTarget", "Escalations", "escalation_text"]

_log = logging.getLogger(__name__)

#: where the approvals console shows one request, under the service's base URL
#: (``sagacity.approvals.console``: its prefix and route; a test holds the two together)
CONSOLE_REQUEST_PATH = "/console/approvals/{saga_id}/{seq}"
#: the longest failure text a request row keeps
_ERROR_CHARS = 500


@dataclass(frozen=True, slots=True)
class EscalationTarget:
    """Where a worker sends escalations: a chat tool's incoming webhook, and the console's base
    URL its message links to (either may be unset)."""

    webhook: str | None = None
    console_url: str | None = None
    #: one POST's limit (connect, send, read): a webhook that hangs costs one attempt
    timeout: timedelta = timedelta(seconds=10)

    @property
    def to(self) -> str:
        """The webhook's scheme and host, as records name it: its path is often the secret."""
        if not self.webhook:
            return ""
        parts = urlsplit(self.webhook)
        return f"{parts.scheme}://{parts.netloc.rpartition('@')[2]}"

    def link(self, saga_id: str, seq: int) -> str | None:
        """The console page of the request, or None without a console URL."""
        if not self.console_url:
            return None
        path = CONSOLE_REQUEST_PATH.format(saga_id=quote(saga_id, safe=""), seq=seq)
        return self.console_url.rstrip("/") + path


def _span(seconds: float) -> str:
    """A wait as people say it: ``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``."""
    whole = int(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    if hours:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    return f"{minutes} min" if minutes else f"{secs} s"


def _as_text(value: str) -> str:
    """``value`` as a chat tool shows text, not markup: one line, in a code span (no
    ``@channel`` mention, no formatting), Slack's ``&``, ``<``, ``>`` escaped (no ``<!channel>``,
    no ``<url|label>`` link). A saga id is chosen by whoever starts the saga."""
    line = "".join(" " if c.isspace() or not c.isprintable() else c for c in value)
    line = line.replace("`", "'").replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return f"`{line}`"


def escalation_text(req: Escalate, target: EscalationTarget) -> str:
    """The message: which saga and tool wait, for how long, and where to decide. The call's
    input stays out of it (a chat channel is no place for it, redacted or not)."""
    link = target.link(req.saga_id, req.journal_seq)
    command = f"sagacity approvals show {shlex.quote(req.saga_id)} {req.journal_seq}"
    where = link or _as_text(command)
    return (
        f"Approval overdue: saga {_as_text(req.saga_id)} has waited {_span(req.waited_s)} for a decision "
        f"on {req.tool_name} (request seq {req.journal_seq}). Decide: {where}"
    )


class _WebhookHidden(logging.Filter):
    """Shows the webhook as its scheme and host in httpx's request log (which names the URL)."""

    def __init__(self, target: EscalationTarget) -> None:
        super().__init__()
        self._url, self._shown = target.webhook, target.to

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(str(a) == self._url for a in record.args):
            record.args = tuple(self._shown if str(a) == self._url else a for a in record.args)
        return True


class Escalations:
    """Posts escalations to the worker's webhook; the request row lets one attempt post."""

    def __init__(self, state: ActivityState, target: EscalationTarget | None) -> None:
        self.state = state
        self.target = target or EscalationTarget()
        self._warned = False
        if self.target.webhook:
            logging.getLogger("httpx").addFilter(_WebhookHidden(self.target))

    @activity.defn(name=ESCALATE_APPROVAL)
    @typed
    async def escalate_approval(self, req: Escalate) -> Escalated:
        target, store = self.target, self.state.approvals
        to = target.to
        claim = await self.state.outlast(
            lambda: store.claim_escalation(req.saga_id, req.journal_seq, at=req.at, to=to)
        )
        if isinstance(claim, str):
            # another attempt posted, or stopped mid-POST (taken as unknown: a chat message
            # twice is noise that hides the next one), or the request was decided meanwhile
            known: dict[str, EscalationOutcome] = {
                "sent": "sent",
                "recorded": "recorded",
                "gone": "pending",
            }
            return Escalated(to=to, outcome=known.get(claim, "unknown"))
        if target.webhook is None:
            if not self._warned:
                self._warned = True
                _log.warning(
                    "approval requests past their SLA are escalated with no one notified: "
                    "set SAGACITY_ESCALATION_WEBHOOK (and SAGACITY_CONSOLE_URL for the link)"
                )
            await self._finish(req, claim, "recorded")
            return Escalated(to=to, outcome="recorded")
        try:
            async with httpx.AsyncClient(timeout=target.timeout.total_seconds()) as http:
                response = await http.post(
                    target.webhook, json={"text": escalation_text(req, target)}
                )
            response.raise_for_status()
        except httpx.HTTPError as exc:
            # the message names the host, never the URL (its path is the webhook's secret)
            why = f"{type(exc).__name__} from {to}"
            if isinstance(exc, httpx.HTTPStatusError):
                why = f"{to} answered {exc.response.status_code}"
            await self._finish(req, claim, "failed", why)
            _log.warning(
                "escalation of %s seq %s failed (attempt %s): %s",
                req.saga_id,
                req.journal_seq,
                claim,
                why,
            )
            # retried by the saga's retry policy, with backoff; the saga waits on meanwhile. No
            # cause: httpx's messages hold the URL, which would reach history
            raise ApplicationError(
                f"escalation webhook: {why}", to, type="EscalationFailed"
            ) from None
        await self._finish(req, claim, "sent")
        return Escalated(to=to, outcome="sent")

    async def _finish(self, req: Escalate, attempt: int, state: str, why: str = "") -> None:
        store = self.state.approvals
        await self.state.outlast(
            lambda: store.finish_escalation(
                req.saga_id, req.journal_seq, attempt, state, why[:_ERROR_CHARS] or None
            )
        )
