"""The approvals HTTP API: pending calls approved or rejected, SUSPECT calls resolved, by a principal.

Every route needs ``Authorization: Bearer <token>``: a static token (``SAGACITY_APPROVAL_TOKENS``),
or with OIDC configured a JWT verified against the provider's JWKS (:mod:`.oidc`). The token
names the principal, and the principal is the approver (or resolver) the journal records (a body
cannot name one); the service signs each decision for that principal with its own key. The token
is checked before anything else, the path and body included; bodies over :data:`MAX_BODY` bytes
are refused unread. Errors share one JSON shape, :class:`ErrorBody`, whatever went wrong.
``sagacity approvals serve`` runs this app under uvicorn, with the codec server's routes
(:mod:`.codec_server`); the OpenAPI document is served at ``/openapi.json`` and kept in
``docs/approvals-openapi.json``.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Mapping
from importlib.metadata import version
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Depends, FastAPI, Path, Query, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictBool, model_validator
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from sagacity.approvals import codec_server, console
from sagacity.approvals.codec_server import CodecCors, CodecServer, codec_router
from sagacity.approvals.console import WebConsole, console_router
from sagacity.approvals.oidc import OidcVerifier
from sagacity.approvals.service import (
    CURSOR_PATTERN,
    MAX_PAGE,
    ApprovalService,
    DecisionResult,
    Inbox,
    PendingRequest,
    inbox_filter,
)
from sagacity.approvals.suspects import Resolution, SagaView
from sagacity.asgi import BodyTooLarge, read_body, replaying
from sagacity.errors import (
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalRefused,
    ApproverNotAllowed,
    DecisionUnsigned,
    DecodeNotAllowed,
    InvalidEntry,
    InvalidInput,
    ResolutionRefused,
    ResolverNotAllowed,
    SagacityError,
    SagaNotFound,
    SagaUnavailable,
    StoreUnavailable,
    SuspectConflict,
    SuspectNotFound,
)
from sagacity.inputs import NAME_PATTERN, check_json, check_name

__all__ = ["MAX_BODY", "ErrorBody", "create_app", "openapi_document"]

#: request bodies larger than this are refused (413) before they are read in full
MAX_BODY = 64 * 1024
#: Temporal's default limit on a workflow id's length
_ID_MAX = 1000
_BIGINT_MAX = 2**63 - 1
#: ages further back than a century are refused (a datetime cannot go back 2**63 seconds)
_AGE_MAX_S = 100 * 365 * 24 * 3600
#: served without a token: the API's own description
_PUBLIC = frozenset({"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc"})

#: the methods a 405's Allow may name
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")

_log = logging.getLogger(__name__)

#: what the document declares of a name the API checks with check_name (its length, its text)
_NAME: dict[str, Any] = {"maxLength": _ID_MAX, "pattern": NAME_PATTERN}
#: a reason's text as _plain() checks it: no control characters but tab and newline
_PLAIN_PATTERN = r"^[^\x00-\x08\x0b-\x1f]*$"

_bearer = HTTPBearer(
    auto_error=False,
    description="A token from SAGACITY_APPROVAL_TOKENS, or a JWT from the configured OIDC provider.",
)


class ErrorBody(BaseModel):
    """Why a request was refused. ``error`` is stable; ``detail`` is for people."""

    error: str = Field(
        description="unauthorized, approver_not_allowed, approval_not_found, approval_conflict, "
        "saga_not_found, suspect_not_found, suspect_conflict, invalid_request, "
        "payload_too_large, not_found, method_not_allowed, saga_unavailable, …"
    )
    detail: str
    #: for approval_conflict: unknown_seq, already_decided, not_waiting, input_hash_mismatch;
    #: for suspect_conflict: already_resolved, not_waiting, refused
    kind: str | None = None
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="for invalid_request: what was wrong, field by field"
    )


def _plain(value: str) -> str:
    """Text a journal row and a Temporal payload can hold: no NUL or other control characters."""
    if any(ord(c) < 32 and c not in "\t\n" for c in value):
        raise ValueError("must not contain NUL or other control characters")
    return value


def _plain_or_none(value: str | None) -> str | None:
    return None if value is None else _plain(value)


def _saga_id(value: str | None) -> str | None:
    if value is not None:
        check_name(value, what="a saga id", max_len=_ID_MAX)
    return value


def _tool_names(value: list[str] | None) -> list[str] | None:
    for name in value or ():
        check_name(name, what="a tool name", max_len=_ID_MAX)
    return value


class ApproveBody(BaseModel):
    """Optional. The approver is the token's principal, never a field here."""

    model_config = ConfigDict(extra="forbid")

    input_hash: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{64}$",
        description="the input hash (SHA-256, lowercase hex) the approver saw; the saga refuses "
        "the approval (409) if it is not the hash of the call it waits to run",
    )
    args: dict[str, Any] | None = Field(
        default=None,
        description="approve with changes: the arguments the call runs with instead of the "
        "proposed ones (a JSON object). The saga checks them against the tool first and refuses "
        "arguments that do not fit (422), leaving the request open; the journal keeps both",
    )


class RejectBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[
        str,
        Field(
            min_length=1,
            max_length=2000,
            description="journaled with REJECTED; no control characters but tab and newline",
            json_schema_extra={"pattern": _PLAIN_PATTERN},
        ),
        AfterValidator(_plain),
    ]
    message: Annotated[
        str | None,
        Field(
            default=None,
            min_length=1,
            max_length=2000,
            description="for whoever made the call: an agent's model gets it as the tool's "
            "result, to try another way; journaled and signed with REJECTED; no control "
            "characters but tab and newline",
            json_schema_extra={"pattern": _PLAIN_PATTERN},
        ),
        AfterValidator(_plain_or_none),
    ]


class ResolveBody(BaseModel):
    """What the principal found out about a SUSPECT call. The resolver is the token's principal."""

    # declared as checked below: a call that did not happen has no result
    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "if": {"properties": {"happened": {"const": False}}, "required": ["happened"]},
            "then": {"properties": {"result": {"type": "null"}}},
        },
    )

    happened: StrictBool = Field(
        description="true: the call took effect (EXECUTED is journaled, the saga goes on and "
        "compensates it if it fails later); false: it did not (FAILED, the saga compensates "
        "what ran before it)"
    )
    result: Any = Field(
        default=None,
        description="when it happened: what the call returned, for later steps and its "
        "compensation (JSON, at most 100 levels deep)",
    )

    @model_validator(mode="after")
    def _result_is_data(self) -> ResolveBody:
        if not self.happened and self.result is not None:
            raise ValueError("a result is only for a call that happened")
        check_json(self.result, what="result")
        return self


SagaId = Annotated[
    str,
    Path(
        description="the saga id (its Temporal workflow id): no control characters, not blank",
        json_schema_extra=_NAME,
    ),
    AfterValidator(_saga_id),
]
Seq = Annotated[
    int, Path(ge=1, le=_BIGINT_MAX, description="journal seq of the AWAITING_APPROVAL row")
]
CallSeq = Annotated[
    int,
    Path(ge=1, le=_BIGINT_MAX, description="journal seq of the SUSPECT call's INTENT row"),
]

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or unknown bearer token"},
    413: {"model": ErrorBody, "description": f"a body over {MAX_BODY:,} bytes"},
    422: {"model": ErrorBody, "description": "malformed path or body"},
}
_DECISION_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    403: {"model": ErrorBody, "description": "the principal may not decide this tool"},
    404: {"model": ErrorBody, "description": "no such saga"},
    409: {"model": ErrorBody, "description": "wrong seq, already decided, or not waiting"},
    503: {"model": ErrorBody, "description": "the saga did not answer"},
}

_SUSPECT_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    404: {"model": ErrorBody, "description": "no such saga, or no SUSPECT call at that seq"},
    409: {"model": ErrorBody, "description": "already resolved, the saga ended, or it refused"},
    503: {"model": ErrorBody, "description": "the saga did not answer, or not in time"},
}

_STATUS: list[tuple[type[SagacityError], int]] = [
    (ApproverNotAllowed, 403),
    (ResolverNotAllowed, 403),
    (DecisionUnsigned, 403),
    (DecodeNotAllowed, 403),
    (ApprovalNotFound, 404),
    (SagaNotFound, 404),
    (SuspectNotFound, 404),
    (ApprovalConflict, 409),
    (SuspectConflict, 409),
    (InvalidInput, 422),
    (InvalidEntry, 422),
    (SagaUnavailable, 503),
    (StoreUnavailable, 503),
    (ApprovalRefused, 409),
    (ResolutionRefused, 409),
]


def create_app(
    service: ApprovalService,
    tokens: Mapping[str, str],
    *,
    oidc: OidcVerifier | None = None,
    max_body: int = MAX_BODY,
    codec: CodecServer | None = None,
    web: WebConsole | None = None,
) -> FastAPI:
    """The API over ``service``; ``tokens`` maps each bearer token to the principal it names,
    and ``oidc`` (when given) accepts the JWTs of an OIDC provider as well.

    ``codec``: the codec server's routes decode and encode with it (:mod:`.codec_server`).
    ``web``: the console's pages, under ``/console``, signed in with the same tokens.
    """
    app = _app()
    if web is not None:

        async def authenticate(token: str) -> str | None:
            return await _token_principal(app, token)

        web.authenticate = authenticate
        app.include_router(console_router(web))
        app.mount(f"{console.PREFIX}/static", console.static_files(), name="console-static")
    app.state.service = service
    app.state.tokens = dict(tokens)
    app.state.oidc = oidc
    app.state.codec = codec
    if codec is not None and codec.namespace:
        _declare_namespace(app, codec.namespace)
    app.add_middleware(_Gate, max_body=max_body)
    app.add_middleware(CodecCors, origins=codec.cors_origins if codec else ())
    return app


def _declare_namespace(app: FastAPI, namespace: str) -> None:
    """The document ``app`` serves names its codec's namespace (the committed document is for
    no configuration in particular, and cannot)."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        first = app.openapi_schema is None
        document = generate()
        if first:
            codec_server.declare_namespace(document, namespace)
        return document

    app.openapi = openapi  # type: ignore[method-assign]


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document (what ``/openapi.json`` serves)."""
    return _app().openapi()


def _principal_of(request: Request) -> str | None:
    """The principal the gate authenticated for this request (None: none, or a public path)."""
    principal: str | None = request.scope.get("state", {}).get("principal")
    return principal


def _lookup(tokens: Mapping[str, str], given: str) -> str | None:
    """The principal ``given`` names, comparing with every token in constant time each."""
    # timing does not narrow a guess; a token that is not UTF-8 text matches none
    raw = given.encode("utf-8", "surrogateescape")
    found = None
    for token, principal in tokens.items():
        if hmac.compare_digest(raw, token.encode()):
            found = principal
    return found


async def _bearer_principal(scope: Scope) -> str | None:
    """The principal of the request's ``Authorization: Bearer`` header, read from the raw scope:
    a static token's, else (with OIDC) a verified JWT's."""
    header = Request(scope).headers.get("authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return await _token_principal(scope["app"], token.strip())


async def _token_principal(app: FastAPI, token: str) -> str | None:
    """The principal ``token`` names: a static token's, else (with OIDC) a verified JWT's."""
    found = _lookup(app.state.tokens, token)
    oidc: OidcVerifier | None = app.state.oidc
    if found is None and oidc is not None:
        found = await oidc.principal_async(token)
    return found


async def _console_principal(scope: Scope) -> str | None:
    """The principal of the console's session cookie, checked as a bearer token is."""
    token = Request(scope).cookies.get(console.COOKIE, "").strip()
    return await _token_principal(scope["app"], token) if token else None


class _Gate:
    """Before any route: a valid bearer token (401), a body of at most ``max_body`` bytes (413).

    The body is read here, bounded, and handed on whole, so nothing downstream reads more of it;
    a request without a valid token is answered before its body or path are looked at.
    """

    def __init__(self, app: ASGIApp, max_body: int) -> None:
        self.app = app
        self.max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if console.in_console(path):
            send = _with_headers(send, console.HEADERS)
        if path in _PUBLIC:
            await self.app(scope, receive, send)
            return
        if not console.is_public(path):
            # the console's pages take its session cookie, and only they do: the API never
            # reads a cookie, so no other site can ride a signed-in browser into it
            if console.in_console(path):
                principal = await _console_principal(scope)
                target = quote(path if path != console.PREFIX else console.PREFIX + "/")
                refusal: ASGIApp = RedirectResponse(f"{console.PREFIX}/sign-in?next={target}", 303)
            else:
                principal = await _bearer_principal(scope)
                refusal = _unauthorized()
            if principal is None:
                await refusal(scope, receive, send)
                return
            scope.setdefault("state", {})["principal"] = principal
        # every body is capped, the public sign-in form's included
        codec = path.startswith(codec_server.PREFIX + "/")
        await _capped(self.app, codec_server.MAX_BODY if codec else self.max_body)(
            scope, receive, send
        )


def _with_headers(send: Send, headers: Mapping[str, str]) -> Send:
    """``send``, adding ``headers`` to the response's start (where it does not set them)."""
    extra = [(k.lower().encode(), v.encode()) for k, v in headers.items()]

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            present = {name for name, _ in message.get("headers", [])}
            added = [(k, v) for k, v in extra if k not in present]
            message = {**message, "headers": [*message.get("headers", []), *added]}
        await send(message)

    return sending


def _capped(app: ASGIApp, max_body: int) -> ASGIApp:
    """``app`` behind a body read here, bounded (413 past ``max_body`` bytes) and handed on
    whole, so nothing downstream reads more of it."""

    async def capped(scope: Scope, receive: Receive, send: Send) -> None:
        too_large = _error(
            413,
            ErrorBody(
                error="payload_too_large",
                detail=f"the request body is over {max_body:,} bytes",
            ),
        )
        declared = Request(scope).headers.get("content-length", "")
        if declared.isdigit() and int(declared) > max_body:
            await too_large(scope, receive, send)
            return
        try:
            body = await read_body(receive, max_body)
        except BodyTooLarge:
            await too_large(scope, receive, send)
            return
        if body is None:
            return  # the client left
        await app(scope, replaying(body, receive), send)

    return capped


async def _principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    principal = _principal_of(request)
    if principal is None or credentials is None:
        raise _Unauthenticated
    return principal


async def _service(request: Request) -> ApprovalService:
    service: ApprovalService = request.app.state.service
    return service


Principal = Annotated[str, Depends(_principal)]
Service = Annotated[ApprovalService, Depends(_service)]


class _Unauthenticated(Exception):
    """No bearer token, or one that names no principal."""


class _ErrorResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        # ASCII escapes: a detail quoting bad input (a lone surrogate) still renders
        return json.dumps(content, ensure_ascii=True, separators=(",", ":")).encode("ascii")


def _error(status: int, body: ErrorBody, headers: Mapping[str, str] | None = None) -> JSONResponse:
    """``body`` as the answer, with ``headers`` (a 405's ``Allow``; a 401 gets its challenge)."""
    headers = {**(headers or {}), **({"WWW-Authenticate": "Bearer"} if status == 401 else {})}
    return _ErrorResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def _allow(request: Request, headers: Mapping[str, str] | None) -> dict[str, str]:
    """A 405's headers, its ``Allow`` naming every method the app's routes take at the path
    (Starlette's names the first matching route's only: GET, not the POST beside it)."""
    said = (headers or {}).get("Allow", "")
    methods = {method.strip() for method in said.split(",") if method.strip()}
    routes = [r for r in request.app.router.routes if not isinstance(r, Mount)]
    for method in _METHODS:
        probe = {**request.scope, "method": method}
        if any(route.matches(probe)[0] is Match.FULL for route in routes):
            methods.add(method)
    return {**(headers or {}), "Allow": ", ".join(sorted(methods))}


def _unauthorized() -> JSONResponse:
    return _error(401, ErrorBody(error="unauthorized", detail="a valid bearer token is required"))


def _app() -> FastAPI:
    app = FastAPI(
        title="Sagacity approvals",
        version=version("sagacity"),
        description="Pending approvals of tool calls (IRREVERSIBLE ones, and those a needs_approval "
        "rule asked about), and decisions on them.",
        generate_unique_id_function=lambda route: route.name,
    )

    @app.exception_handler(_Unauthenticated)
    async def unauthenticated(request: Request, exc: _Unauthenticated) -> JSONResponse:
        return _unauthorized()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the body is parsed before dependencies run: check the token first here too, so an
        # unauthenticated caller learns nothing about what the API expects
        if _principal_of(request) is None:
            return _unauthorized()
        errors = jsonable_encoder(exc.errors(), exclude={"input", "ctx", "url"})
        summary = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors
        )
        return _error(422, ErrorBody(error="invalid_request", detail=summary, errors=errors))

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        public = request.url.path in _PUBLIC or console.is_public(request.url.path)
        if not public and _principal_of(request) is None:
            return _unauthorized()
        if exc.status_code == 400:  # FastAPI could not parse the body
            why = {
                RecursionError: "the JSON body is nested too deeply",
                UnicodeDecodeError: "the body is not UTF-8 text",
            }.get(type(exc.__cause__), "the body is not valid JSON")
            return _error(422, ErrorBody(error="invalid_request", detail=why))
        code = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large"}
        detail = exc.detail if isinstance(exc.detail, str) else "refused"
        return _error(
            exc.status_code,
            ErrorBody(error=code.get(exc.status_code, "http_error"), detail=detail),
            headers=_allow(request, exc.headers) if exc.status_code == 405 else exc.headers,
        )

    @app.exception_handler(SagacityError)
    async def refused(request: Request, exc: SagacityError) -> JSONResponse:
        status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 500)
        if status == 422:
            return _error(422, ErrorBody(error="invalid_request", detail=str(exc)))
        kind = exc.kind if isinstance(exc, ApprovalConflict | SuspectConflict) else None
        return _error(status, ErrorBody(error=exc.code, detail=str(exc), kind=kind))

    @app.exception_handler(Exception)
    async def failed(request: Request, exc: Exception) -> JSONResponse:
        # a bug, not bad input: logged with its traceback here, never shown to the caller
        _log.error("request %s %s failed", request.method, request.url.path, exc_info=exc)
        return _error(500, ErrorBody(error="internal_error", detail="the request failed"))

    @app.get("/approvals", responses=_ERRORS)
    async def list_approvals(
        service: Service,
        _: Principal,
        saga_id: Annotated[
            str | None,
            Query(description="only this saga's requests", json_schema_extra=_NAME),
            AfterValidator(_saga_id),
        ] = None,
        tool: Annotated[
            list[str] | None,
            Query(
                description="only requests to call these tools (repeat the parameter)",
                json_schema_extra={"items": {"type": "string", **_NAME}},
            ),
            AfterValidator(_tool_names),
        ] = None,
        older_than_s: Annotated[
            float | None,
            Query(ge=0, le=_AGE_MAX_S, description="only requests waiting this long or longer"),
        ] = None,
        newer_than_s: Annotated[
            float | None,
            Query(ge=0, le=_AGE_MAX_S, description="only requests waiting at most this long"),
        ] = None,
        limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="requests per page")] = 50,
        after: Annotated[
            str | None,
            Query(
                description="the `next` of the previous page",
                json_schema_extra={"pattern": CURSOR_PATTERN},
            ),
        ] = None,
    ) -> Inbox:
        """Pending approval requests a page at a time, oldest first, with counts; only the
        page's sagas are asked their live status."""
        where = inbox_filter(
            tools=tool, saga_id=saga_id, older_than_s=older_than_s, newer_than_s=newer_than_s
        )
        return await service.inbox(where, after=after, limit=limit)

    @app.get(
        "/approvals/{saga_id}/{seq}",
        responses={**_ERRORS, 404: {"model": ErrorBody, "description": "no such request"}},
    )
    async def get_approval(
        service: Service, _: Principal, saga_id: SagaId, seq: Seq
    ) -> PendingRequest:
        """One pending request."""
        return await service.get(saga_id, seq)

    @app.post("/approvals/{saga_id}/{seq}/approve", responses=_DECISION_ERRORS)
    async def approve(
        service: Service,
        principal: Principal,
        saga_id: SagaId,
        seq: Seq,
        body: ApproveBody | None = None,
    ) -> DecisionResult:
        """Approve the call as the token's principal; the call runs once APPROVED is journaled."""
        given = body.input_hash if body else None
        args = body.args if body else None
        return await service.approve(saga_id, seq, approver=principal, input_hash=given, args=args)

    @app.post("/approvals/{saga_id}/{seq}/reject", responses=_DECISION_ERRORS)
    async def reject(
        service: Service, principal: Principal, saga_id: SagaId, seq: Seq, body: RejectBody
    ) -> DecisionResult:
        """Reject the call as the token's principal; the saga compensates what ran before it
        (an agent's model is told, with the message, and may try another way)."""
        return await service.reject(
            saga_id, seq, approver=principal, reason=body.reason, message=body.message
        )

    @app.get(
        "/sagas/{saga_id}",
        responses={
            **_ERRORS,
            404: {"model": ErrorBody, "description": "no such saga"},
            503: {"model": ErrorBody, "description": "the saga did not answer"},
        },
    )
    async def get_saga(service: Service, _: Principal, saga_id: SagaId) -> SagaView:
        """The saga's live state: what it waits for, its SUSPECT call if it has one."""
        return await service.saga(saga_id)

    @app.post("/sagas/{saga_id}/suspects/{seq}/resolve", responses=_SUSPECT_ERRORS)
    async def resolve_suspect(
        service: Service, principal: Principal, saga_id: SagaId, seq: CallSeq, body: ResolveBody
    ) -> Resolution:
        """Say, as the token's principal, whether the SUSPECT call at ``seq`` took effect.

        Answers once the saga has taken the resolution (its outcome row is in ``outcome`` when
        written in time); 409 ``refused`` if the saga refused it, 503 if it did not take it in
        time (it will when its worker runs).
        """
        return await service.resolve(
            saga_id, seq, resolver=principal, happened=body.happened, result=body.result
        )

    app.include_router(codec_router(_principal))
    return app
