"""The approvals HTTP API: list pending calls, approve or reject them as an authenticated principal.

Every route needs ``Authorization: Bearer <token>``; the token names the principal, and the
principal is the approver the journal records (a body cannot name one). Errors share one JSON
shape, :class:`ErrorBody`. ``sagacity approvals serve`` runs this app under uvicorn; the OpenAPI
document is served at ``/openapi.json`` and kept in ``docs/approvals-openapi.json``.
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping
from importlib.metadata import version
from typing import Annotated, Any

from fastapi import Depends, FastAPI, Path, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from sagacity.approvals.service import ApprovalService, DecisionResult, PendingRequest
from sagacity.errors import (
    ApprovalConflict,
    ApprovalNotFound,
    ApprovalRefused,
    ApproverNotAllowed,
    SagacityError,
    SagaUnavailable,
)

__all__ = ["ErrorBody", "create_app", "openapi_document"]

_bearer = HTTPBearer(auto_error=False, description="A token from SAGACITY_APPROVAL_TOKENS.")


class ErrorBody(BaseModel):
    """Why a request was refused. ``error`` is stable; ``detail`` is for people."""

    error: str = Field(
        description="unauthorized, approver_not_allowed, approval_not_found, approval_conflict, "
        "invalid_request, saga_unavailable, …"
    )
    detail: str
    #: for approval_conflict: unknown_seq, already_decided, not_waiting, input_hash_mismatch
    kind: str | None = None
    errors: list[dict[str, Any]] | None = Field(
        default=None, description="for invalid_request: what was wrong, field by field"
    )


class ApproveBody(BaseModel):
    """Optional. The approver is the token's principal, never a field here."""

    model_config = ConfigDict(extra="forbid")

    input_hash: str | None = Field(
        default=None,
        description="the input hash the approver saw; the saga refuses the approval (409) if "
        "it is not the hash of the call it waits to run",
    )


class RejectBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000, description="journaled with REJECTED")


Seq = Annotated[int, Path(ge=1, description="journal seq of the AWAITING_APPROVAL row")]

_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": ErrorBody, "description": "missing or unknown bearer token"},
    422: {"model": ErrorBody, "description": "malformed path or body"},
}
_DECISION_ERRORS: dict[int | str, dict[str, Any]] = {
    **_ERRORS,
    403: {"model": ErrorBody, "description": "the principal may not decide this tool"},
    404: {"model": ErrorBody, "description": "no such saga"},
    409: {"model": ErrorBody, "description": "wrong seq, already decided, or not waiting"},
    503: {"model": ErrorBody, "description": "the saga did not answer"},
}

_STATUS: list[tuple[type[SagacityError], int]] = [
    (ApproverNotAllowed, 403),
    (ApprovalNotFound, 404),
    (ApprovalConflict, 409),
    (SagaUnavailable, 503),
    (ApprovalRefused, 409),
]


def create_app(service: ApprovalService, tokens: Mapping[str, str]) -> FastAPI:
    """The API over ``service``; ``tokens`` maps each bearer token to the principal it names."""
    app = _app()
    app.state.service = service
    app.state.tokens = dict(tokens)
    return app


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document (what ``/openapi.json`` serves)."""
    return _app().openapi()


def _principal_of(request: Request, credentials: HTTPAuthorizationCredentials | None) -> str | None:
    if credentials is None:
        return None
    given = credentials.credentials.encode()
    tokens: dict[str, str] = request.app.state.tokens
    # compare against every token, in constant time each, so timing does not narrow a guess
    found = None
    for token, principal in tokens.items():
        if hmac.compare_digest(given, token.encode()):
            found = principal
    return found


async def _principal(
    request: Request, credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> str:
    principal = _principal_of(request, credentials)
    if principal is None:
        raise _Unauthenticated
    return principal


async def _service(request: Request) -> ApprovalService:
    service: ApprovalService = request.app.state.service
    return service


Principal = Annotated[str, Depends(_principal)]
Service = Annotated[ApprovalService, Depends(_service)]


class _Unauthenticated(Exception):
    """No bearer token, or one that names no principal."""


def _error(status: int, body: ErrorBody) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse(body.model_dump(exclude_none=True), status_code=status, headers=headers)


def _unauthorized() -> JSONResponse:
    return _error(401, ErrorBody(error="unauthorized", detail="a valid bearer token is required"))


def _app() -> FastAPI:
    app = FastAPI(
        title="Sagacity approvals",
        version=version("sagacity"),
        description="Pending approvals of IRREVERSIBLE tool calls, and decisions on them.",
        generate_unique_id_function=lambda route: route.name,
    )

    @app.exception_handler(_Unauthenticated)
    async def unauthenticated(request: Request, exc: _Unauthenticated) -> JSONResponse:
        return _unauthorized()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        # the body is parsed before dependencies run: check the token first here too, so an
        # unauthenticated caller learns nothing about what the API expects
        if _principal_of(request, await _bearer(request)) is None:
            return _unauthorized()
        errors = jsonable_encoder(exc.errors(), exclude={"input", "ctx", "url"})
        summary = "; ".join(
            f"{'.'.join(str(p) for p in e.get('loc', ()))}: {e.get('msg')}" for e in errors
        )
        return _error(422, ErrorBody(error="invalid_request", detail=summary, errors=errors))

    @app.exception_handler(SagacityError)
    async def refused(request: Request, exc: SagacityError) -> JSONResponse:
        status = next((code for cls, code in _STATUS if isinstance(exc, cls)), 500)
        kind = exc.kind if isinstance(exc, ApprovalConflict) else None
        return _error(status, ErrorBody(error=exc.code, detail=str(exc), kind=kind))

    @app.get("/approvals", responses=_ERRORS)
    async def list_approvals(
        service: Service, _: Principal, saga_id: str | None = None
    ) -> list[PendingRequest]:
        """Pending approval requests, oldest first, with each saga's live status."""
        return await service.list(saga_id=saga_id)

    @app.get(
        "/approvals/{saga_id}/{seq}",
        responses={**_ERRORS, 404: {"model": ErrorBody, "description": "no such request"}},
    )
    async def get_approval(
        service: Service, _: Principal, saga_id: str, seq: Seq
    ) -> PendingRequest:
        """One pending request."""
        return await service.get(saga_id, seq)

    @app.post("/approvals/{saga_id}/{seq}/approve", responses=_DECISION_ERRORS)
    async def approve(
        service: Service,
        principal: Principal,
        saga_id: str,
        seq: Seq,
        body: ApproveBody | None = None,
    ) -> DecisionResult:
        """Approve the call as the token's principal; the call runs once APPROVED is journaled."""
        given = body.input_hash if body else None
        return await service.approve(saga_id, seq, approver=principal, input_hash=given)

    @app.post("/approvals/{saga_id}/{seq}/reject", responses=_DECISION_ERRORS)
    async def reject(
        service: Service, principal: Principal, saga_id: str, seq: Seq, body: RejectBody
    ) -> DecisionResult:
        """Reject the call as the token's principal; the saga compensates what ran before it."""
        return await service.reject(saga_id, seq, approver=principal, reason=body.reason)

    return app
