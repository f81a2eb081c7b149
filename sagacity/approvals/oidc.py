"""OIDC bearer tokens for the approvals HTTP API: a JWT checked against the provider's JWKS.

The token must be signed by a key the JWKS URL publishes, with an accepted algorithm, and carry
the configured issuer and audience and an expiry in the future; the principal is the configured
claim (``sub`` by default). Keys are fetched with PyJWT's :class:`jwt.PyJWKClient` and cached;
an unknown key id refetches the set, so the provider can rotate keys.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import jwt

__all__ = ["OidcVerifier"]

#: principals longer than this, or holding control characters, are refused
_PRINCIPAL_MAX = 200


class OidcVerifier:
    """Turns a JWT bearer token into the principal it names, or None when it does not verify."""

    def __init__(
        self,
        jwks_url: str,
        *,
        issuer: str,
        audience: str,
        algorithms: Sequence[str] = ("RS256", "ES256"),
        principal_claim: str = "sub",
        timeout_s: float = 5.0,
    ) -> None:
        self.issuer = issuer
        self.audience = audience
        self.algorithms = list(algorithms)
        self.principal_claim = principal_claim
        self._jwks = jwt.PyJWKClient(jwks_url, cache_keys=True, lifespan=300, timeout=timeout_s)

    def principal(self, token: str) -> str | None:
        """The principal ``token`` names once verified (blocking: it may fetch the JWKS)."""
        try:
            key = self._jwks.get_signing_key_from_jwt(token)
            claims = jwt.decode(
                token,
                key.key,
                algorithms=self.algorithms,
                audience=self.audience,
                issuer=self.issuer,
                options={"require": ["exp", "iss", "aud"]},
            )
        except (jwt.PyJWTError, ValueError):
            return None
        value = claims.get(self.principal_claim)
        if not isinstance(value, str) or not value.strip() or len(value) > _PRINCIPAL_MAX:
            return None
        if not value.isprintable():
            return None
        return value

    async def principal_async(self, token: str) -> str | None:
        """:meth:`principal` off the event loop (fetching the JWKS blocks)."""
        return await asyncio.to_thread(self.principal, token)
