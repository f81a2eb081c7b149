"""The codec server: the Temporal UI and the ``temporal`` CLI decode Sagacity's payloads here.

Temporal's remote codec protocol: ``POST /codec/encode`` and ``POST /codec/decode`` take and answer
``{"payloads": [...]}``, each payload in protobuf JSON (``metadata`` values and ``data`` in
base64), the namespace in an ``X-Namespace`` header. Both need the API's bearer token (401).
Decoding shows what the codec hides, so only principals named in ``SAGACITY_CODEC_DECODERS`` may
(403), and every decode is logged with its principal; encoding only encrypts (the UI and CLI
encode a signal's input), so any principal may. Browsers may call from the origins in
``SAGACITY_CODEC_CORS_ORIGINS`` (the Temporal UI's). :func:`sagacity.approvals.http.create_app`
serves these routes; the codec is the approvals service's own, from the settings.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException
from starlette.middleware.cors import CORSMiddleware
from starlette.types import ASGIApp, Receive, Scope, Send
from temporalio.api.common.v1 import Payload
from temporalio.converter import PayloadCodec

from sagacity.errors import DecodeNotAllowed, InvalidInput, PayloadUnreadable
from sagacity.temporal.codec import unreadable

__all__ = [
    "MAX_BODY",
    "PREFIX",
    "CodecCors",
    "CodecServer",
    "PayloadsBody",
    "codec_router",
    "declare_namespace",
]

PREFIX = "/codec"
#: request bodies of the codec routes: a batch of payloads, each up to Temporal's 2 MB blob limit
MAX_BODY = 8 * 1024 * 1024

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CodecServer:
    """What the codec routes serve: the codec, who may decode, and for which browser origins."""

    codec: PayloadCodec
    decoders: frozenset[str] = frozenset()
    #: the namespace the codec's keys are for; a request naming another is refused
    namespace: str | None = None
    cors_origins: tuple[str, ...] = ()


#: standard base64 with its padding, as ``_bytes`` reads it (JSON Schema ``pattern``)
_BASE64: dict[str, Any] = {
    "pattern": r"^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$",
    "contentEncoding": "base64",
}


class PayloadJson(BaseModel):
    """A Temporal payload in protobuf JSON: every value base64."""

    model_config = ConfigDict(extra="forbid")

    metadata: dict[str, Annotated[str, Field(json_schema_extra=_BASE64)]] = Field(
        default_factory=dict
    )
    data: str = Field(default="", json_schema_extra=_BASE64)


class PayloadsBody(BaseModel):
    """``{"payloads": [...]}``, as Temporal's remote codec protocol sends and expects it."""

    model_config = ConfigDict(extra="forbid")

    payloads: list[PayloadJson]


def _bytes(text: str, where: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except ValueError:  # binascii.Error, or text with characters outside ASCII
        raise InvalidInput(f"{where}: not base64") from None


def _from_json(body: PayloadsBody) -> list[Payload]:
    return [
        Payload(
            metadata={k: _bytes(v, f"payloads[{i}].metadata.{k}") for k, v in p.metadata.items()},
            data=_bytes(p.data, f"payloads[{i}].data"),
        )
        for i, p in enumerate(body.payloads)
    ]


def _to_json(payloads: Sequence[Payload]) -> PayloadsBody:
    def text(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return PayloadsBody(
        payloads=[
            PayloadJson(metadata={k: text(v) for k, v in p.metadata.items()}, data=text(p.data))
            for p in payloads
        ]
    )


def _server(request: Request, namespace: str | None) -> CodecServer:
    server: CodecServer | None = request.app.state.codec
    if server is None:
        raise HTTPException(404, "this service has no payload codec: set SAGACITY_CODEC_KEYS")
    if namespace and server.namespace and namespace != server.namespace:
        raise InvalidInput(f"X-Namespace: this codec serves namespace {server.namespace!r}")
    return server


_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "missing or unknown bearer token"},
    404: {"description": "the service has no payload codec configured"},
    413: {"description": f"a body over {MAX_BODY:,} bytes"},
    422: {"description": "malformed body, a payload that does not decrypt, another namespace"},
}

Namespace = Annotated[
    str | None, Header(alias="X-Namespace", description="the Temporal namespace of the payloads")
]


def codec_router(principal: Callable[..., Coroutine[Any, Any, str]]) -> APIRouter:
    """The codec routes; ``principal`` is the API's dependency naming the authenticated caller."""
    router = APIRouter(prefix=PREFIX, tags=["codec"])
    authenticated = Depends(principal)  # a default, not an annotation: it names a local

    @router.post("/encode", responses=_ERRORS, dependencies=[authenticated])
    async def encode(
        request: Request, body: PayloadsBody, namespace: Namespace = None
    ) -> PayloadsBody:
        """Encrypt payloads as Sagacity's workers do (the UI and CLI encode signal inputs)."""
        server = _server(request, namespace)
        return _to_json(await server.codec.encode(_from_json(body)))

    @router.post(
        "/decode",
        responses={**_ERRORS, 403: {"description": "not in SAGACITY_CODEC_DECODERS"}},
    )
    async def decode(
        request: Request, body: PayloadsBody, namespace: Namespace = None, who: str = authenticated
    ) -> PayloadsBody:
        """Decrypt payloads for a principal allowed to read them; clear payloads come back as sent."""
        server = _server(request, namespace)
        if who not in server.decoders:
            raise DecodeNotAllowed(
                f"principal {who!r} may not decode payloads (SAGACITY_CODEC_DECODERS)"
            )
        payloads = _from_json(body)
        try:
            decoded = await server.codec.decode(payloads)
        except PayloadUnreadable as exc:
            raise InvalidInput(str(exc)) from None
        why = next(filter(None, map(unreadable, decoded)), None)
        if why is not None:
            raise InvalidInput(why)
        _log.info("codec: %s decoded %d payload(s) of namespace %s", who, len(payloads), namespace)
        return _to_json(decoded)

    return router


def declare_namespace(document: dict[str, Any], namespace: str) -> None:
    """Name in ``document`` (the API's OpenAPI) the one ``X-Namespace`` the codec takes: any
    other is refused, so a document without it would declare requests valid that are not."""
    for route in ("encode", "decode"):
        for parameter in document["paths"][f"{PREFIX}/{route}"]["post"]["parameters"]:
            if parameter["name"] == "X-Namespace":
                parameter["schema"] = {"type": "string", "enum": [namespace]}


class CodecCors:
    """CORS on the codec routes only, for the browser origins given (none: no CORS at all).

    Outside the token check, so a browser's preflight (which carries no token) is answered.
    """

    def __init__(self, app: ASGIApp, origins: Sequence[str]) -> None:
        self.app = app
        self.cors = (
            CORSMiddleware(
                app,
                allow_origins=list(origins),
                allow_methods=["POST"],
                allow_headers=["Authorization", "Content-Type", "X-Namespace"],
                allow_credentials=True,
            )
            if origins
            else None
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        codec = scope["type"] == "http" and scope["path"].startswith(PREFIX + "/")
        await (self.cors if self.cors is not None and codec else self.app)(scope, receive, send)
