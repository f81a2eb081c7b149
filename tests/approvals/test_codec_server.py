"""The codec routes of the approvals API, over HTTP (in-process ASGI): who may use them, what bad
bodies get, and the browser's CORS preflight."""

from __future__ import annotations

import base64
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from temporalio.api.common.v1 import Payload
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.codec_server import CodecServer
from sagacity.approvals.http import MAX_BODY, create_app
from sagacity.store import ApprovalStore
from sagacity.temporal.codec import AesGcmCodec, CodecKey

UI = "http://localhost:8233"
ALICE = {"Authorization": "Bearer tok-alice", "X-Namespace": "default"}
BOB = {"Authorization": "Bearer tok-bob", "X-Namespace": "default"}
CODEC = AesGcmCodec([CodecKey("k1", os.urandom(32))])


def as_json(payloads: list[Payload]) -> dict[str, Any]:
    def text(raw: bytes) -> str:
        return base64.b64encode(raw).decode()

    return {
        "payloads": [
            {"metadata": {k: text(v) for k, v in p.metadata.items()}, "data": text(p.data)}
            for p in payloads
        ]
    }


@pytest.fixture
async def api(
    temporal_client: Client, approvals: ApprovalStore
) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(
        ApprovalService(temporal_client, approvals),
        {"tok-alice": "alice", "tok-bob": "bob"},
        codec=CodecServer(
            CODEC, decoders=frozenset({"alice"}), namespace="default", cors_origins=(UI,)
        ),
    )
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://approvals") as client:
        yield client


async def test_encode_for_any_principal_decode_for_decoders_only(api: httpx.AsyncClient) -> None:
    clear = Payload(metadata={"encoding": b"json/plain"}, data=b'{"card":"4111"}')
    encoded = await api.post("/codec/encode", json=as_json([clear]), headers=BOB)
    assert encoded.status_code == 200
    (sealed,) = encoded.json()["payloads"]
    assert base64.b64decode(sealed["metadata"]["encoding"]) == b"binary/encrypted"
    assert b"4111" not in base64.b64decode(sealed["data"])

    decoded = await api.post("/codec/decode", json=encoded.json(), headers=ALICE)
    assert decoded.json() == as_json([clear])
    refused = await api.post("/codec/decode", json=encoded.json(), headers=BOB)
    assert (refused.status_code, refused.json()["error"]) == (403, "decode_not_allowed")
    # a clear payload comes back as it was sent
    passed = await api.post("/codec/decode", json=as_json([clear]), headers=ALICE)
    assert passed.json() == as_json([clear])


async def test_bad_bodies_get_a_4xx_after_the_token(api: httpx.AsyncClient) -> None:
    other_key = as_json(await AesGcmCodec([CodecKey("k9", os.urandom(32))]).encode([Payload()]))
    # sealed under the server's key id by someone without the key: it does not decrypt
    (forged,) = await CODEC.encode([Payload()])
    forged.data = os.urandom(len(forged.data))
    cases: list[tuple[dict[str, Any], dict[str, str], int, str]] = [
        ({"content": b"{not json"}, {}, 401, "unauthorized"),
        ({"content": b"{not json"}, ALICE, 422, "invalid_request"),
        ({"json": {"payloads": [{"data": "not base64!"}]}}, ALICE, 422, "invalid_request"),
        ({"json": {"payloads": [], "extra": 1}}, ALICE, 422, "invalid_request"),
        ({"json": other_key}, ALICE, 422, "invalid_request"),
        ({"json": as_json([forged])}, ALICE, 422, "invalid_request"),
        ({"json": {"payloads": []}}, {**ALICE, "X-Namespace": "other"}, 422, "invalid_request"),
        ({"content": b"x" * (9 * 1024 * 1024)}, ALICE, 413, "payload_too_large"),
    ]
    for options, headers, status, error in cases:
        response = await api.post("/codec/decode", headers=headers, **options)
        assert (response.status_code, response.json()["error"]) == (status, error), response.text
    # a batch bigger than the approval routes' limit still decodes
    big = as_json(await CODEC.encode([Payload(data=os.urandom(2 * MAX_BODY))]))
    assert (await api.post("/codec/decode", json=big, headers=ALICE)).status_code == 200


async def test_base64_with_characters_outside_ascii_is_a_422_not_a_500(
    api: httpx.AsyncClient,
) -> None:
    """Found by the fuzz (tests/approvals/test_fuzz.py): base64 rejected such text with a
    ValueError that was not a binascii.Error, so both routes answered 500."""
    for body in (
        {"payloads": [{"data": "\u0090J"}]},
        {"payloads": [{"metadata": {"encoding": "json/pl\u00e1in"}, "data": ""}]},
    ):
        for route in ("/codec/encode", "/codec/decode"):
            response = await api.post(route, json=body, headers=ALICE)
            assert (response.status_code, response.json()["error"]) == (422, "invalid_request")
            assert "not base64" in response.json()["detail"], response.text


async def test_the_ui_origin_passes_the_preflight_and_others_do_not(
    api: httpx.AsyncClient,
) -> None:
    def preflight(origin: str, path: str = "/codec/decode") -> httpx.Request:
        return api.build_request(
            "OPTIONS",
            path,
            headers={
                "Origin": origin,
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization,content-type,x-namespace",
            },
        )

    allowed = await api.send(preflight(UI))
    assert allowed.status_code == 200
    assert allowed.headers["access-control-allow-origin"] == UI
    assert (await api.send(preflight("https://evil.example"))).status_code == 400
    # the approval routes get no CORS: a browser page cannot call them
    elsewhere = await api.send(preflight(UI, "/approvals"))
    assert "access-control-allow-origin" not in elsewhere.headers
    answered = await api.post("/codec/encode", json={"payloads": []}, headers={**BOB, "Origin": UI})
    assert answered.headers["access-control-allow-origin"] == UI


async def test_without_codec_keys_the_routes_say_so(
    temporal_client: Client, approvals: ApprovalStore
) -> None:
    app = create_app(ApprovalService(temporal_client, approvals), {"tok-alice": "alice"})
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://approvals") as client:
        response = await client.post("/codec/decode", json={"payloads": []}, headers=ALICE)
    assert response.status_code == 404 and "SAGACITY_CODEC_KEYS" in response.json()["detail"]
