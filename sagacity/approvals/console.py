"""The web console: an inbox of waiting calls, a request to decide, a saga's journal as a picture.

Server-rendered pages (Jinja2, autoescaped) over the same :class:`ApprovalService` as the JSON API
and the CLI; a small script only refreshes a running saga's page. Nothing is fetched from
elsewhere: the stylesheet and the script are served from this package.

Signing in takes the same bearer token the API takes (a static token, or with OIDC a JWT); the
console keeps it in an ``HttpOnly``, ``SameSite=Strict`` cookie scoped to ``/console`` and checks
it on every request exactly as the API checks its header, so a revoked token signs out at once.
The JSON API never reads that cookie. Every form that changes something carries a token derived
from the session (an HMAC keyed by it) and is refused from another origin, so another site cannot
make a signed-in browser decide. Inputs are shown as the journal holds them: a redacted field is
its keyed fingerprint, marked as hidden, never the value.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import io
import json
import tempfile
import zipfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from importlib.resources import files
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, quote, urlsplit

from fastapi import APIRouter, Request, Response
from fastapi.responses import HTMLResponse, RedirectResponse
from jinja2 import Environment, FileSystemLoader, select_autoescape
from starlette.staticfiles import StaticFiles
from temporalio.client import Client
from temporalio.service import RPCError

from sagacity.approvals.halts import HaltService
from sagacity.approvals.rollbacks import left_live, start_rollback
from sagacity.approvals.service import MAX_PAGE, ApprovalService, inbox_filter
from sagacity.approvals.suspects import SagaView
from sagacity.errors import (
    ApprovalNotFound,
    ApproverNotAllowed,
    InvalidInput,
    SagacityError,
    SagaNotFound,
    SagaUnavailable,
)
from sagacity.evidence.anchors import verify_journal
from sagacity.evidence.certify import Finding, certify, corrections
from sagacity.evidence.checkpoints import CheckpointDir
from sagacity.evidence.export import export_bundle
from sagacity.evidence.graph import duration, saga_path, visible
from sagacity.evidence.graph_svg import svg
from sagacity.evidence.report import SagaReport
from sagacity.inputs import check_name, load_object
from sagacity.journal import Entry
from sagacity.store.halts import Halt, HaltPolicy, HaltScope
from sagacity.store.journal import JournalStore
from sagacity.temporal.runs import RunChains

__all__ = [
    "COOKIE",
    "HEADERS",
    "PREFIX",
    "WebConsole",
    "console_router",
    "csrf_token",
    "in_console",
    "is_public",
    "static_files",
]

PREFIX = "/console"
#: the cookie that holds the signed-in token
COOKIE = "sagacity_console"
#: a session lasts a working day; the token's own expiry (a JWT's) ends it sooner
_SESSION_S = 8 * 3600
#: rows of a saga's journal a page shows
_ROWS_SHOWN = 1000
_PUBLIC = frozenset({f"{PREFIX}/sign-in"})
_ASSETS = files("sagacity.approvals")
_AGES = {"": None, "PT1H": 3600.0, "P1D": 86400.0, "P7D": 7 * 86400.0}


#: what every console response carries (set by the app's gate, whoever made the response):
#: nothing but this origin's own files, no framing, no referrer outside, nothing cached
HEADERS = {
    "Content-Security-Policy": "default-src 'self'; img-src 'self' data:; style-src 'self'; "
    "script-src 'self'; frame-ancestors 'none'; form-action 'self'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}


def in_console(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def is_public(path: str) -> bool:
    """Whether ``path`` is served without signing in: the sign-in page and the static files."""
    return path in _PUBLIC or path.startswith(f"{PREFIX}/static/")


def csrf_token(session: str) -> str:
    """The token each of the session's forms carries: only its holder can compute it."""
    return hmac.new(session.encode(), b"sagacity-console-form", hashlib.sha256).hexdigest()


@dataclass
class WebConsole:
    """What the console reads besides the service: the journal, and the anchors to check."""

    service: ApprovalService
    journal: JournalStore
    checkpoints: CheckpointDir | None = None
    #: the decision keyring's file, copied into exported bundles
    keyring_file: Path | None = None
    #: checks a signing-in token: the principal it names, or None
    authenticate: Callable[[str], Awaitable[str | None]] | None = field(default=None, repr=False)
    #: the kill switch, for the Operations page (None: the page only says how to halt)
    halts: HaltService | None = None
    #: who may halt and resume here (None: every principal who signs in)
    operators: Sequence[str] | None = None
    #: what the Operations page certifies: sagas active this recently
    certify_window: timedelta = timedelta(hours=1)
    #: where a rollback runs when Temporal no longer has the saga's run (its own queue else)
    task_queue: str = "sagacity"


def console_router(console: WebConsole) -> APIRouter:
    """The console's pages, under :data:`PREFIX`; authentication is the app's gate."""
    router = APIRouter(prefix=PREFIX, include_in_schema=False)
    pages = Environment(
        loader=FileSystemLoader(str(_ASSETS / "templates")),
        autoescape=select_autoescape(default=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    pages.filters["age"] = _age
    pages.filters["when"] = _when
    pages.filters["segment"] = lambda value: quote(str(value), safe="")
    pages.filters["visible"] = visible

    def render(request: Request, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        session = request.cookies.get(COOKIE, "")
        html = pages.get_template(name).render(
            principal=request.scope.get("state", {}).get("principal"),
            csrf=csrf_token(session) if session else "",
            prefix=PREFIX,
            **context,
        )
        return HTMLResponse(html, status_code=status)

    @router.get("/sign-in")
    async def sign_in_page(request: Request, next: str = "") -> HTMLResponse:
        return render(request, "sign_in.html", next=_local(next), failed=False)

    @router.post("/sign-in")
    async def sign_in(request: Request) -> Response:
        form = await _form(request)
        token, target = form.get("token", "").strip(), _local(form.get("next", ""))
        principal = None
        if token and console.authenticate is not None and _same_origin(request):
            principal = await console.authenticate(token)
        if principal is None:
            return render(request, "sign_in.html", 401, next=target, failed=True)
        done = RedirectResponse(target or f"{PREFIX}/", status_code=303)
        done.set_cookie(
            COOKIE,
            token,
            max_age=_SESSION_S,
            path=PREFIX,
            # always: behind a TLS proxy the scheme seen here is http, and browsers keep
            # Secure cookies for http://localhost and 127.0.0.1, where the dev stack runs
            secure=True,
            httponly=True,
            samesite="strict",
        )
        return done

    def forged(request: Request) -> HTMLResponse:
        return render(
            request,
            "error.html",
            403,
            title="Refused",
            message="This form did not come from a console page of your session; nothing changed.",
        )

    @router.post("/sign-out")
    async def sign_out(request: Request) -> Response:
        if await _checked_form(request) is None:
            return forged(request)
        done = RedirectResponse(f"{PREFIX}/sign-in", status_code=303)
        done.delete_cookie(COOKIE, path=PREFIX)
        return done

    @router.get("/")
    async def inbox(
        request: Request,
        tool: str = "",
        saga: str = "",
        age: str = "",
        after: str | None = None,
        limit: int = 50,
    ) -> HTMLResponse:
        try:
            if tool:
                check_name(tool, what="a tool name")
            if saga:
                check_name(saga, what="a saga id")
            if age not in _AGES:
                raise InvalidInput(f"age: one of {', '.join(a for a in _AGES if a)}")
            where = inbox_filter(
                tools=[tool] if tool else None, saga_id=saga or None, older_than_s=_AGES[age]
            )
            page = await console.service.inbox(
                where, after=after or None, limit=max(1, min(limit, MAX_PAGE))
            )
        except InvalidInput as exc:
            return render(request, "error.html", 422, title="Bad filter", message=str(exc))
        return render(
            request,
            "inbox.html",
            page=page,
            tools=sorted(page.by_tool.items()),
            tool=tool,
            saga=saga,
            age=age,
            ages=[a for a in _AGES if a],
            now=datetime.now(UTC),
        )

    @router.get("/approvals/{saga_id}/{seq}")
    async def request_page(request: Request, saga_id: str, seq: int) -> HTMLResponse:
        return await _request_view(request, saga_id, seq)

    async def _request_view(
        request: Request, saga_id: str, seq: int, *, error: str | None = None, status: int = 200
    ) -> HTMLResponse:
        try:
            pending = await console.service.get(saga_id, seq)
        except ApprovalNotFound as exc:
            return render(
                request, "error.html", 404, title="No such request", message=str(exc), saga=saga_id
            )
        rows, total = await _rows(console.journal, saga_id)
        principal = request.scope.get("state", {}).get("principal")
        may = pending.deciders is None or principal in pending.deciders
        return render(
            request,
            "request.html",
            status,
            req=pending,
            input=_pretty(pending.input, pending.hidden),
            editable=_editable(pending.input),
            rows=rows,
            total=total,
            may_decide=may,
            error=error,
            now=datetime.now(UTC),
        )

    @router.post("/approvals/{saga_id}/{seq}/approve")
    async def approve(request: Request, saga_id: str, seq: int) -> Response:
        form = await _checked_form(request)
        if form is None:
            return forged(request)
        principal = request.state.principal
        try:
            taken = await console.service.approve(
                saga_id,
                seq,
                approver=principal,
                input_hash=form.get("input_hash") or None,
                args=load_object(form["args"], what="the changed arguments")
                if "args" in form
                else None,
            )
        except SagacityError as exc:
            return await _request_view(request, saga_id, seq, error=str(exc), status=_status(exc))
        # a co-approval the tool's policy counts, more still needed: the request stays open
        return _to_saga(saga_id, "co-approved" if taken.awaiting else "approved")

    @router.post("/approvals/{saga_id}/{seq}/reject")
    async def reject(request: Request, saga_id: str, seq: int) -> Response:
        form = await _checked_form(request)
        if form is None:
            return forged(request)
        reason = _box(form, "reason")
        # an empty box is no message: the model is told the reason alone
        message = _box(form, "message") or None
        try:
            if not reason:
                raise InvalidInput("give a reason: it is journaled with the rejection")
            await console.service.reject(
                saga_id, seq, approver=request.state.principal, reason=reason, message=message
            )
        except SagacityError as exc:
            return await _request_view(request, saga_id, seq, error=str(exc), status=_status(exc))
        return _to_saga(saga_id, "rejected")

    @router.get("/sagas/{saga_id}")
    async def saga_page(request: Request, saga_id: str, done: str = "") -> HTMLResponse:
        (view, missing), (rows, total), report = await asyncio.gather(
            _view(console.service, saga_id),
            _rows(console.journal, saga_id),
            _verify(console, saga_id),
        )
        if missing is not None and not rows:
            return render(request, "error.html", 404, title="No such saga", message=missing)
        pending = None
        if view.pending_approval_seq is not None:
            pending = f"{PREFIX}/approvals/{quote(saga_id, safe='')}/{view.pending_approval_seq}"
        left_live = await _left_live(console, saga_id)
        graph = svg(saga_path(saga_id, rows, ended_unfinished=bool(left_live)))
        return render(
            request,
            "saga.html",
            saga_id=saga_id,
            view=view,
            rows=rows,
            total=total,
            graph=graph,
            report=report,
            pending=pending,
            done=done if done in {"approved", "co-approved", "rejected", "rollback"} else "",
            live=view.workflow_status == "running",
            left_live=left_live,
            corrected=corrections(saga_id, rows),
            may_roll_back=_may_roll_back(console, request.state.principal),
        )

    @router.post("/sagas/{saga_id}/rollback")
    async def roll_back(request: Request, saga_id: str) -> Response:
        form = await _checked_form(request)
        if form is None:
            return forged(request)
        principal = request.state.principal
        try:
            check_name(saga_id, what="a saga id")
            if not _may_roll_back(console, principal):
                raise ApproverNotAllowed(f"{principal!r} may not roll sagas back (operators)")
            await start_rollback(
                console.service.client,
                console.journal,
                saga_id,
                by=principal,
                reason=form.get("reason", "").strip() or "rolled back from the console",
                task_queue=console.task_queue,
            )
        except SagacityError as exc:
            return render(
                request,
                "error.html",
                _status(exc),
                title="Not rolled back",
                message=str(exc),
                saga=saga_id,
            )
        return _to_saga(saga_id, "rollback")

    @router.get("/operations")
    async def operations_page(
        request: Request, halted: int | None = None, lifted: int | None = None
    ) -> HTMLResponse:
        done = ""
        if halted is not None:
            done = f"Halt {halted} is in force."
        elif lifted is not None:
            done = f"Halt {lifted} is lifted."
        return await operations(request, done=done)

    async def operations(
        request: Request, *, done: str = "", error: str = "", status: int = 200
    ) -> HTMLResponse:
        halts: list[tuple[Halt, list[str]]] = []
        if console.halts is not None:
            halts = await console.halts.listing(active=False)
        findings = [
            f
            async for cert in certify(
                console.journal,
                console.service.approvals,
                since=datetime.now(UTC) - console.certify_window,
                checkpoints=console.checkpoints,
                keyring=console.service.keyring,
                runs=RunChains(lambda: _client(console)),
            )
            for f in cert.findings
        ]
        return render(
            request,
            "operations.html",
            status,
            active=[(h, problems) for h, problems in halts if h.active],
            lifted=[h for h, _ in halts if not h.active][:20],
            findings=findings,
            window=console.certify_window,
            may_operate=_may_operate(console, request.state.principal),
            can_halt=console.halts is not None,
            done=done,
            error=error,
        )

    @router.post("/operations/halt")
    async def halt(request: Request) -> Response:
        form = await _checked_form(request)
        if form is None:
            return forged(request)
        try:
            service = _operator_service(console, request.state.principal)
            policy: HaltPolicy = "compensate" if form.get("policy") == "compensate" else "keep"
            saga = form.get("saga", "").strip()
            result = await service.halt(
                scope=HaltScope(
                    tool=form.get("tool", "").strip() or None,
                    task_queue=form.get("task_queue", "").strip() or None,
                    sagas=(saga,) if saga else None,
                ),
                policy=policy,
                reason=form.get("reason", "").strip(),
                operator=request.state.principal,
                settle=timedelta(seconds=2),
            )
        except SagacityError as exc:
            return await operations(request, error=str(exc), status=_status(exc))
        return RedirectResponse(f"{PREFIX}/operations?halted={result.halt_id}", status_code=303)

    @router.post("/operations/{halt_id}/resume")
    async def resume(request: Request, halt_id: int) -> Response:
        form = await _checked_form(request)
        if form is None:
            return forged(request)
        try:
            service = _operator_service(console, request.state.principal)
            await service.resume(
                halt_id, by=request.state.principal, reason=form.get("reason", "").strip()
            )
        except SagacityError as exc:
            return await operations(request, error=str(exc), status=_status(exc))
        return RedirectResponse(f"{PREFIX}/operations?lifted={halt_id}", status_code=303)

    @router.get("/sagas/{saga_id}/bundle.zip")
    async def bundle(saga_id: str) -> Response:
        check_name(saga_id, what="a saga id")
        with tempfile.TemporaryDirectory() as scratch:
            out = Path(scratch) / "bundle"
            await export_bundle(
                console.journal,
                out,
                [saga_id],
                checkpoints=console.checkpoints,
                keyring=console.keyring_file,
                note={"exported_by": "sagacity console"},
            )
            data = _zip(out)
        name = "".join(c if c.isalnum() or c in "-_." else "_" for c in saga_id)[:100]
        return Response(
            data,
            media_type="application/zip",
            headers={"Content-Disposition": f'attachment; filename="{name}-evidence.zip"'},
        )

    return router


def _may_operate(console: WebConsole, principal: str) -> bool:
    return console.halts is not None and (
        console.operators is None or principal in console.operators
    )


def _may_roll_back(console: WebConsole, principal: str) -> bool:
    """Who may halt may roll an ended saga back: the operators (every principal when unset)."""
    return console.operators is None or principal in console.operators


async def _client(console: WebConsole) -> Client:
    return console.service.client


async def _left_live(console: WebConsole, saga_id: str) -> list[Finding]:
    """The effects the saga left live after it ended unfinished; none when Temporal or the
    journal cannot tell now (the page shows the rest)."""
    try:
        return await left_live(console.service.client, console.journal, saga_id)
    except (SagacityError, RPCError):
        return []


def _operator_service(console: WebConsole, principal: str) -> HaltService:
    if console.halts is None:
        raise InvalidInput("this console cannot halt: run `sagacity halt` from a shell")
    if not _may_operate(console, principal):
        raise ApproverNotAllowed(f"{principal!r} may not halt or resume (SAGACITY_OPERATORS)")
    return console.halts


def static_files() -> StaticFiles:
    """The console's stylesheet and script, to mount at ``PREFIX/static``."""
    return StaticFiles(directory=str(_ASSETS / "static"))


def _status(refusal: SagacityError) -> int:
    """A refusal as a status: bad input 422, a principal not allowed 403, anything else the
    saga refused 409."""
    if isinstance(refusal, InvalidInput):
        return 422
    return 403 if isinstance(refusal, ApproverNotAllowed) else 409


def _to_saga(saga_id: str, done: str) -> RedirectResponse:
    return RedirectResponse(f"{PREFIX}/sagas/{quote(saga_id, safe='')}?done={done}", 303)


async def _form(request: Request) -> dict[str, str]:
    """The urlencoded form a page posted (the gate has already capped its size);
    :class:`InvalidInput` when it is not UTF-8 text."""
    try:
        body = (await request.body()).decode("ascii")
        fields = parse_qs(body, keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise InvalidInput("the form is not UTF-8 text") from None
    return {k: v[0] for k, v in fields.items() if v}


def _box(form: dict[str, str], name: str) -> str:
    """A text box's value, trimmed, its line breaks as ``\n`` (browsers send a textarea's as
    CR LF, and a journaled text holds no CR)."""
    return form.get(name, "").replace("\r\n", "\n").strip()


async def _checked_form(request: Request) -> dict[str, str] | None:
    """The form, if it comes from this origin with the session's form token; else None."""
    form = await _form(request)
    session = request.cookies.get(COOKIE, "")
    given = form.get("csrf", "")
    expected = csrf_token(session).encode()
    if not (session and _same_origin(request) and hmac.compare_digest(given.encode(), expected)):
        return None
    return form


def _same_origin(request: Request) -> bool:
    """Whether the browser says the request comes from this site: by ``Origin`` or ``Referer``,
    else by ``Sec-Fetch-Site`` (a browser or extension that strips the first two still sends
    it); none of them: a non-browser client, which has no cookie another site could ride on."""
    host = request.headers.get("host", "")
    for header in ("origin", "referer"):
        given = request.headers.get(header)
        if given:
            return urlsplit(given).netloc == host
    # same-site is another origin too (a sibling host), refused as its Origin would be
    return request.headers.get("sec-fetch-site", "").lower() not in ("cross-site", "same-site")


def _local(target: str) -> str:
    """``target`` when it is a console path of this site, else nothing (no open redirects)."""
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not parts.path.startswith(f"{PREFIX}/"):
        return ""
    return target if "\\" not in target else ""


async def _rows(journal: JournalStore, saga_id: str) -> tuple[list[Entry], int]:
    rows = await journal.after(saga_id, 0, limit=_ROWS_SHOWN)
    if len(rows) < _ROWS_SHOWN:
        return rows, rows[-1].seq if rows else 0
    return rows, await _head(journal, saga_id)


async def _view(service: ApprovalService, saga_id: str) -> tuple[SagaView, str | None]:
    """What the saga says now; a journal outlives its workflow (retention, a lost worker), so
    a saga that cannot answer is shown as such, with why."""
    try:
        return await service.saga(saga_id), None
    except SagaNotFound as exc:
        return SagaView(saga_id=saga_id, workflow_status="not_found"), str(exc)
    except SagaUnavailable:
        return SagaView(saga_id=saga_id, workflow_status="no_answer"), None


async def _head(journal: JournalStore, saga_id: str) -> int:
    last = await journal.head(saga_id)
    return 0 if last is None else last.seq


async def _verify(console: WebConsole, saga_id: str) -> SagaReport | None:
    """The saga's chain checked, and its checkpoints and decision signatures where configured."""
    reports = verify_journal(
        console.journal,
        saga_ids=[saga_id],
        checkpoints=console.checkpoints,
        keyring=console.service.keyring,
    )
    async for report in reports:
        return report
    return None


def _zip(folder: Path) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(folder.parent))
    return buffer.getvalue()


@dataclass(frozen=True)
class Token:
    """A piece of pretty-printed JSON: ``hidden`` marks a redacted field's marker."""

    text: str
    hidden: bool = False


def _editable(json_text: str) -> str:
    """The proposed arguments as the "approve with changes" form starts from: indented JSON
    (text that is not JSON, as a row altered behind Sagacity's back may hold, as it is)."""
    try:
        return json.dumps(json.loads(json_text or "{}"), indent=2, ensure_ascii=False)
    except ValueError:
        return json_text


def _pretty(json_text: str, hidden: Sequence[str]) -> list[Token]:
    """The input indented for reading, each redaction marker a token of its own, marked."""
    try:
        value = json.loads(json_text)
    except ValueError:
        return [Token(visible(json_text))]
    if not hidden:
        return [Token(visible(json.dumps(value, indent=2, ensure_ascii=False)))]
    tokens: list[Token] = []

    def emit(node: Any, at: str, indent: str) -> None:
        if at in hidden:
            tokens.append(Token(visible(json.dumps(node, ensure_ascii=False)), hidden=True))
        elif isinstance(node, dict) and node:
            tokens.append(Token("{\n"))
            for i, (key, item) in enumerate(node.items()):
                pointer = f"{at}/{str(key).replace('~', '~0').replace('/', '~1')}"
                tokens.append(Token(f"{indent}  {visible(json.dumps(key, ensure_ascii=False))}: "))
                emit(item, pointer, indent + "  ")
                tokens.append(Token(",\n" if i < len(node) - 1 else "\n"))
            tokens.append(Token(f"{indent}}}"))
        elif isinstance(node, list) and node:
            tokens.append(Token("[\n"))
            for i, item in enumerate(node):
                tokens.append(Token(f"{indent}  "))
                emit(item, f"{at}/{i}", indent + "  ")
                tokens.append(Token(",\n" if i < len(node) - 1 else "\n"))
            tokens.append(Token(f"{indent}]"))
        else:
            tokens.append(Token(visible(json.dumps(node, ensure_ascii=False))))

    emit(value, "", "")
    return tokens


def _age(value: datetime, now: datetime | None = None) -> str:
    return duration(max((now or datetime.now(UTC)) - value, timedelta(0)))


def _when(value: datetime | None) -> str:
    return "—" if value is None else f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S} UTC"
