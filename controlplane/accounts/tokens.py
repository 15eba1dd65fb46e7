"""Offline verification of RS256 bearer tokens against a cached JWKS, the same way for
Keycloak's tokens and the local issuer's (DESIGN decision 7)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import jwt
from django.conf import settings

from controlplane.core.errors import Unavailable

log = logging.getLogger(__name__)

# A token with an unknown ``kid`` makes the cache fetch the JWKS again, but at most this
# often, so a stream of tokens with made-up kids cannot hammer the issuer.
MIN_REFRESH_INTERVAL_S = 1.0
# Clock skew tolerated on ``exp``/``iat`` between the issuer and us.
LEEWAY_S = 5
REQUIRED_CLAIMS = ["exp", "iat", "sub", "aud", "iss"]


class InvalidToken(Exception):  # noqa: N818 (the name callers know)
    """A bearer token that is malformed, forged, expired or not for us."""


class JwksCache:
    """Public keys by ``kid``, from ``fetch()`` (which returns a JWKS document).

    Keys are kept ``ttl_s`` seconds; a ``kid`` not in the cache triggers a refresh (a key
    rotation at the issuer), at most one such refresh per ``min_refresh_interval_s``.
    Only RSA signing keys are kept. When ``fetch`` fails (raises ``Unavailable``) the keys
    already known keep serving, so an issuer outage does not log everyone out; with no
    keys at all the error propagates (HTTP 503). Thread-safe."""

    def __init__(
        self,
        fetch: Callable[[], dict[str, Any]],
        *,
        ttl_s: float,
        min_refresh_interval_s: float = MIN_REFRESH_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._min_refresh_interval_s = min_refresh_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, Any] = {}
        self._loaded_at: float | None = None
        self._forced_at = float("-inf")  # the last refresh an unknown kid caused

    def key(self, kid: str) -> Any:
        """The public key named ``kid``; ``InvalidToken`` if the issuer has none."""
        with self._lock:
            now = self._clock()
            if self._loaded_at is None or now - self._loaded_at > self._ttl_s:
                self._load(now)
            elif kid not in self._keys and now - self._forced_at >= self._min_refresh_interval_s:
                self._forced_at = now
                self._load(now)
            if kid not in self._keys:
                raise InvalidToken(f"unknown signing key {kid!r}")
            return self._keys[kid]

    def invalidate(self) -> None:
        with self._lock:
            self._loaded_at = None

    def _load(self, now: float) -> None:
        try:
            document = self._fetch()
        except Unavailable:
            if not self._keys:
                raise
            log.warning("cannot refresh the JWKS; verifying with the keys already known")
            self._loaded_at = now
            return
        self._keys = {
            str(jwk["kid"]): jwt.algorithms.RSAAlgorithm.from_jwk(jwk)
            for jwk in document.get("keys", [])
            if jwk.get("kty") == "RSA"
            and jwk.get("use", "sig") == "sig"
            and jwk.get("alg", "RS256") == "RS256"
            and "kid" in jwk
        }
        self._loaded_at = now


def verify_rs256(token: str, keys: JwksCache, *, issuer: str) -> dict[str, Any]:
    """The token's claims once its header names RS256 and a known key, its signature
    checks out against that key, it has not expired, and ``iss``/``aud`` are ``issuer``
    and ``settings.TOKEN_AUDIENCE``; else ``InvalidToken``. Other algorithms (``none``,
    HS256 with the public key as secret...) are refused before any key is looked up."""
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != "RS256":
            raise InvalidToken(f"algorithm {header.get('alg')!r} is not accepted")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("the token names no signing key ('kid')")
        return jwt.decode(
            token,
            keys.key(kid),
            algorithms=["RS256"],
            audience=settings.TOKEN_AUDIENCE,
            issuer=issuer,
            leeway=LEEWAY_S,
            options={"require": REQUIRED_CLAIMS},
        )
    except jwt.PyJWTError as exc:
        raise InvalidToken(str(exc)) from exc
