"""The approvals API's OpenAPI document declares the limits the API enforces: a request the
document calls valid is never refused for its form (400 or 422), and the edge values either side
of each limit are refused by both or by neither.

The document is the one the app serves (with the codec's namespace declared) over a real port;
the requests go to the real service over the session's Temporal server and Postgres.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import quote

import httpx
import jsonschema
import pytest
from temporalio.client import Client

from sagacity.approvals import ApprovalService
from sagacity.approvals.codec_server import CodecServer
from sagacity.approvals.http import create_app
from sagacity.store import ApprovalStore
from tests.approvals.openapi_operations import loaded_operations
from tests.serving import serve

TOKENS = {"tok-alice": "alice"}
ALICE = {"Authorization": "Bearer tok-alice"}
NAMESPACE = "limits-namespace"
#: requests generated per operation (SAGACITY_LIMITS_EXAMPLES for more)
EXAMPLES = int(os.environ.get("SAGACITY_LIMITS_EXAMPLES") or 40)


@pytest.fixture
async def api(temporal_client: Client, approvals: ApprovalStore) -> AsyncIterator[str]:
    """The API with the codec (its namespace named), served on a real port: its base URL."""
    codec = temporal_client.data_converter.payload_codec
    assert codec is not None, "the test session runs with the codec on"
    service = ApprovalService(temporal_client, approvals, approvers={"send_confirmation": []})
    server = CodecServer(codec, decoders=frozenset({"alice"}), namespace=NAMESPACE)
    async with serve(create_app(service, TOKENS, codec=server)) as url:
        yield url


async def served(api: str) -> dict[str, Any]:
    async with httpx.AsyncClient(base_url=api) as client:
        document: dict[str, Any] = (await client.get("/openapi.json")).json()
    return document


def parameter(document: dict[str, Any], path: str, method: str, name: str) -> dict[str, Any]:
    found = [p for p in document["paths"][path][method]["parameters"] if p["name"] == name]
    schema: dict[str, Any] = found[0]["schema"]
    return schema


def body(document: dict[str, Any], name: str) -> dict[str, Any]:
    schema: dict[str, Any] = {**document["components"]["schemas"][name]}
    schema["components"] = document["components"]  # for its $refs
    return schema


def valid(schema: dict[str, Any], value: Any) -> bool:
    return bool(jsonschema.validators.Draft202012Validator(schema).is_valid(value))


SAGA_IDS = [
    "a" * 1000,
    " x ",
    "\u00e9\u65e5\u672c\u00a0x",
    "order-1.2:3@4",
    "",
    " ",
    "\u3000\u2003",
    "a" * 1001,
    "a\x00b",
    "a\x7fb",
    "a\x85b",
    "a\tb",
]
REASONS = ["a" * 2000, "tab\tand\nnewline", "\x7f\x85 \u00e9", "", "a" * 2001, "a\rb", "a\x00b"]
CURSORS = [
    "0.0.",
    "-999999999999999999.9999999999999999999." + "x" * 1000,
    "1733450000123456.5.order 1/\u00e9&#",
    "bm90IGEgY3Vyc29y",
    "1.2.a\x00",
    "1.2." + "x" * 1001,
    "1..x",
]
BASE64 = ["", "QR==", "ab+/", "Q===", "ab-_", "QUJDRA"]


async def test_each_limit_is_declared_where_it_is_enforced(api: str) -> None:
    """Either side of each limit: the document and the API agree, value by value."""
    document = await served(api)
    disagree: list[str] = []

    def agree(what: str, value: Any, schema_ok: bool, status: int) -> None:
        taken = status not in (400, 422) and status < 500
        if schema_ok != taken:
            disagree.append(f"{what} {value!r:.60}: schema {schema_ok}, API answered {status}")

    async with httpx.AsyncClient(base_url=api, headers=ALICE, timeout=60) as client:
        saga_id = parameter(document, "/sagas/{saga_id}", "get", "saga_id")
        listed_id = parameter(document, "/approvals", "get", "saga_id")
        for value in SAGA_IDS:
            if value:  # an empty path segment is another route
                answer = await client.get(f"/sagas/{quote(value, safe='')}")
                agree("saga id (path)", value, valid(saga_id, value), answer.status_code)
            answer = await client.get("/approvals", params={"saga_id": value})
            agree("saga id (query)", value, valid(listed_id, value), answer.status_code)
        reject = body(document, "RejectBody")
        for value in REASONS:
            answer = await client.post("/approvals/no-such-saga/5/reject", json={"reason": value})
            agree("reason", value, valid(reject, {"reason": value}), answer.status_code)
        after = parameter(document, "/approvals", "get", "after")
        for value in CURSORS:
            answer = await client.get("/approvals", params={"after": value})
            agree("cursor", value, valid(after, value), answer.status_code)
        payloads = body(document, "PayloadsBody")
        for value in BASE64:
            sent = {"payloads": [{"metadata": {"encoding": value}, "data": value}]}
            answer = await client.post("/codec/encode", json=sent)
            agree("base64", value, valid(payloads, sent), answer.status_code)
        namespace = parameter(document, "/codec/encode", "post", "X-Namespace")
        for value in (NAMESPACE, "another-namespace"):
            answer = await client.post(
                "/codec/encode", json={"payloads": []}, headers={"X-Namespace": value}
            )
            agree("namespace", value, valid(namespace, value), answer.status_code)
        resolve = body(document, "ResolveBody")
        for resolution in ({"happened": False, "result": {"id": 1}}, {"happened": False}):
            answer = await client.post("/sagas/no-such-saga/suspects/3/resolve", json=resolution)
            agree("resolution", resolution, valid(resolve, resolution), answer.status_code)
    assert not disagree, "\n".join(disagree)


async def test_no_request_the_document_calls_valid_is_refused_for_its_form(api: str) -> None:
    """Requests generated from the served document (schemathesis, positive mode): none is
    answered 400 or 422, or 5xx."""
    import schemathesis
    from hypothesis import HealthCheck, Phase, given, settings

    schema = schemathesis.openapi.from_dict(await served(api))
    operations = loaded_operations(schema)
    refused: list[str] = []
    sent = 0

    def generate() -> None:
        nonlocal sent
        for operation in operations:

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=schemathesis.GenerationMode.POSITIVE))
            def run(case: schemathesis.Case[Any]) -> None:
                nonlocal sent
                response = case.call(base_url=api, headers=ALICE, timeout=60)
                sent += 1
                if response.status_code in (400, 422) or response.status_code >= 500:
                    refused.append(
                        f"{case.operation.label}: {response.status_code} {response.text[:300]}\n"
                        f"{case.as_curl_command(headers=ALICE)}"
                    )

            run()

    await asyncio.to_thread(generate)
    assert sent >= len(operations) * EXAMPLES // 2, f"only {sent} requests generated"
    assert not refused, f"{len(refused)} refused:\n\n" + "\n\n".join(refused[:15])
