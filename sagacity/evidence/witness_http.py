"""The witness's HTTP service: C2SP tlog-witness ``add-checkpoint``, and the head it holds.

Routes:

* ``POST /add-checkpoint`` (https://c2sp.org/tlog-witness): 200 and the cosignature line; the
  protocol's 400 / 403 / 404 / 409 / 422 refusals, each with a one-line ``text/plain`` reason (a
  409 over the size held has ``Content-Type: text/x.tlog.size`` and the size as its body); 413
  for a body over :data:`~sagacity.evidence.witness.MAX_REQUEST` bytes, refused unread.
* ``GET /checkpoint?origin=<origin>``, Sagacity's extension: the latest note this witness
  cosigned for that log, its cosignature included (``text/plain``), or 404 when it holds none.
  Verifiers compare it with the published heads to catch a rolled-back checkpoint store.

Bad input of any kind gets a 4xx and changes nothing; a damaged state file is the witness's own
fault (500, logged) and refuses that log until an operator looks.
"""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import PlainTextResponse, Response
from starlette.concurrency import run_in_threadpool

from sagacity.errors import EvidenceUnavailable, WitnessRefused
from sagacity.evidence.witness import MAX_REQUEST, SIZE_TYPE, Witness

__all__ = ["create_app"]

_log = logging.getLogger(__name__)
# origins are short names; a longer query value is no origin
_ORIGIN_MAX = 1024


def _text(status: int, text: str) -> Response:
    return PlainTextResponse(text if text.endswith("\n") else text + "\n", status_code=status)


async def _body(request: Request, limit: int) -> bytes | None:
    """The request body, or None once it passes ``limit`` bytes (the rest is not read)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > limit:
            return None
    return bytes(body)


def create_app(witness: Witness, *, max_body: int = MAX_REQUEST) -> FastAPI:
    """The witness's ASGI app, serving ``witness``."""
    app = FastAPI(
        title="Sagacity witness",
        description="C2SP tlog-witness: cosigns tree heads consistent with the last one seen.",
        openapi_url=None,
        docs_url=None,
        redoc_url=None,
    )

    @app.post("/add-checkpoint")
    async def add_checkpoint(request: Request) -> Response:
        body = await _body(request, max_body)
        if body is None:
            return _text(413, f"the request body is over {max_body:,} bytes")
        try:
            line = await run_in_threadpool(witness.add_checkpoint, body)
        except WitnessRefused as exc:
            if exc.size is not None:
                # exactly this content type: Starlette would add a charset to a text/ media type
                return Response(f"{exc.size}\n", 409, headers={"Content-Type": SIZE_TYPE})
            return _text(exc.status, str(exc))
        except EvidenceUnavailable as exc:
            _log.error("witness: %s", exc)
            return _text(500, "the witness cannot read or store its state; see its log")
        return _text(200, line)

    @app.get("/checkpoint")
    async def checkpoint(request: Request) -> Response:
        origins = request.query_params.getlist("origin")
        if len(origins) != 1 or not 0 < len(origins[0]) <= _ORIGIN_MAX:
            return _text(400, "give one origin: /checkpoint?origin=<the log's origin>")
        try:
            state = await run_in_threadpool(witness.state, origins[0])
        except EvidenceUnavailable as exc:
            _log.error("witness: %s", exc)
            return _text(500, "the witness cannot read its state; see its log")
        if state is None:
            return _text(404, f"no tree head cosigned for {origins[0]!r}")
        return PlainTextResponse(state.note)

    return app
