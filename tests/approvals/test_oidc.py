"""OIDC bearer tokens for the approvals HTTP API: JWTs checked against a JWKS served over HTTP.

The test plays the provider: an RSA key made with ``cryptography``, its public half published
as a JWKS by a real HTTP server on 127.0.0.1, tokens signed with PyJWT. The API fetches the JWKS
itself (PyJWT's ``PyJWKClient``), as it would from a real provider.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from sagacity.approvals import ApprovalService
from sagacity.approvals.http import create_app
from sagacity.approvals.oidc import OidcVerifier
from tests.approvals.conftest import StartOrder

ISSUER = "https://id.example.test"
AUDIENCE = "sagacity-approvals"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@pytest.fixture(scope="module")
def provider_key() -> rsa.RSAPrivateKey:
    return _key()


@pytest.fixture(scope="module")
def jwks_url(provider_key: rsa.RSAPrivateKey) -> Iterator[str]:
    """The provider's JWKS, served over real HTTP until the module's tests are done."""
    jwk = RSAAlgorithm.to_jwk(provider_key.public_key(), as_dict=True)
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/.well-known/jwks.json"
    finally:
        server.shutdown()
        server.server_close()


def token(key: rsa.RSAPrivateKey, **changes: Any) -> str:
    now = int(time.time())
    claims = {
        "iss": ISSUER,
        "aud": AUDIENCE,
        "sub": "u-123",
        "email": "alice@example.com",
        "iat": now,
        "exp": now + 300,
    }
    claims.update(changes)
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": "k1"})


async def test_jwts_from_the_oidc_provider_authenticate_and_bad_ones_are_401(
    jwks_url: str, provider_key: rsa.RSAPrivateKey, service: ApprovalService
) -> None:
    oidc = OidcVerifier(jwks_url, issuer=ISSUER, audience=AUDIENCE, principal_claim="email")
    app = create_app(service, {"static-token": "carol"}, oidc=oidc)
    now = int(time.time())
    cases = {
        "valid": (token(provider_key), 200),
        "static token kept": ("static-token", 200),
        "signed by another key": (token(_key()), 401),
        "wrong audience": (token(provider_key, aud="another-app"), 401),
        "wrong issuer": (token(provider_key, iss="https://evil.example.test"), 401),
        "expired": (token(provider_key, iat=now - 600, exp=now - 60), 401),
        "no principal claim": (token(provider_key, email=None), 401),
        "not a JWT": ("nonsense", 401),
    }
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://approvals"
    ) as http:
        got = {
            name: (await http.get("/approvals", headers={"Authorization": f"Bearer {sent}"}))
            for name, (sent, _) in cases.items()
        }
    assert {name: r.status_code for name, r in got.items()} == {
        name: want for name, (_, want) in cases.items()
    }
    assert got["expired"].json()["error"] == "unauthorized"


async def test_the_principal_is_the_configured_claim_of_the_verified_token(
    jwks_url: str,
    provider_key: rsa.RSAPrivateKey,
    service: ApprovalService,
    start_order: StartOrder,
) -> None:
    waiting = await start_order()
    service.approvers = {"send_confirmation": ["bob@example.com"]}
    oidc = OidcVerifier(jwks_url, issuer=ISSUER, audience=AUDIENCE, principal_claim="email")
    app = create_app(service, {}, oidc=oidc)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://approvals"
    ) as http:
        response = await http.post(
            f"/approvals/{waiting.saga_id}/{waiting.seq}/approve",
            headers={"Authorization": f"Bearer {token(provider_key)}"},
        )
    assert response.status_code == 403
    assert "'alice@example.com' may not decide" in response.json()["detail"]
