"""Offline verification of bearer tokens against the issuer's JWKS (DESIGN decision 7).

``TokenVerifier.verify(token)`` returns the token's ``Principal`` once: the header names
RS256 (``none``, HS256 and every other algorithm are refused before any key is looked
up) and a ``kid`` the JWKS has; the signature checks out; ``exp``, ``iat``, ``sub``,
``iss`` and ``aud`` are present, ``iss`` is the configured issuer, ``aud`` contains the
configured audience and the token has not expired (``LEEWAY_S`` of clock skew); every
claim has its type (``dataplane.client.claims``: ``realm_access`` an object, ``groups`` a
list of strings...). Anything else raises ``InvalidToken`` with a message saying why.

Keys (``JwksKeys``) are fetched from ``jwks_url`` when first needed, kept ``ttl_s``, and
fetched again when a token names an unknown ``kid`` (a key rotation), at most once per
``min_refresh_interval_s`` so made-up kids cannot hammer the issuer. When the issuer
cannot be reached, the keys already known keep serving. Verified tokens are cached until
they expire (bounded by ``max_cached_tokens``), so a client's every call costs one dict
lookup instead of an RSA verification. Blocking (HTTP, RSA): call it off the event loop.
Thread-safe.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import jwt

from dataplane.broker.auth.principal import Principal
from dataplane.client.claims import MalformedClaims

log = logging.getLogger(__name__)

LEEWAY_S = 5
REQUIRED_CLAIMS = ["exp", "iat", "sub", "aud", "iss"]
JWKS_TIMEOUT_S = 5.0
MAX_JWKS_BYTES = 1024 * 1024


class InvalidToken(Exception):  # noqa: N818 (the name the control plane uses too)
    """A bearer token that is malformed, forged, expired or not for this cluster."""


class JwksUnavailable(Exception):  # noqa: N818
    """The JWKS could not be fetched and no key is known yet."""


def fetch_jwks(url: str) -> dict[str, Any]:
    """The JWKS document at ``url``; raises ``OSError``/``ValueError`` on failure."""
    with urllib.request.urlopen(url, timeout=JWKS_TIMEOUT_S) as response:
        document = json.loads(response.read(MAX_JWKS_BYTES))
    if not isinstance(document, dict):
        raise ValueError("the JWKS is not a JSON object")
    return document


class JwksKeys:
    """RSA signing keys by ``kid``, from ``fetch()``; see the module docstring."""

    def __init__(
        self,
        fetch: Callable[[], dict[str, Any]],
        *,
        ttl_s: float = 300.0,
        min_refresh_interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch
        self._ttl_s = ttl_s
        self._min_refresh_interval_s = min_refresh_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, Any] = {}
        self._loaded_at: float | None = None
        self._forced_at = float("-inf")

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
                raise InvalidToken(f"the issuer has no signing key {kid!r}")
            return self._keys[kid]

    def _load(self, now: float) -> None:
        try:
            document = self._fetch()
        except (OSError, ValueError) as exc:
            if not self._keys:
                raise JwksUnavailable(f"cannot fetch the issuer's keys: {exc}") from exc
            log.warning("cannot refresh the JWKS (%s); verifying with the keys known", exc)
            self._loaded_at = now
            return
        self._keys = {
            str(jwk["kid"]): jwt.algorithms.RSAAlgorithm.from_jwk(jwk)
            for jwk in document.get("keys", [])
            if isinstance(jwk, dict)
            and jwk.get("kty") == "RSA"
            and jwk.get("use", "sig") == "sig"
            and jwk.get("alg", "RS256") == "RS256"
            and "kid" in jwk
        }
        self._loaded_at = now


class TokenVerifier:
    """See the module docstring."""

    def __init__(
        self,
        keys: JwksKeys,
        *,
        issuer: str,
        audience: str,
        internal_role: str,
        max_cached_tokens: int = 10_000,
        wall_clock: Callable[[], float] = time.time,
    ) -> None:
        self.keys = keys
        self.issuer = issuer
        self.audience = audience
        self.internal_role = internal_role
        self._max_cached = max_cached_tokens
        self._clock = wall_clock
        self._cache: dict[str, Principal] = {}
        self._lock = threading.Lock()

    def cached(self, token: str) -> Principal | None:
        """The principal of a token verified before and not expired since; cheap."""
        principal = self._cache.get(token)
        if principal is not None and principal.expires_at > self._clock():
            return principal
        return None

    def verify(self, token: str) -> Principal:
        """The token's principal; ``InvalidToken`` (see the module docstring)."""
        principal = self.cached(token)
        if principal is not None:
            return principal
        claims = self._decode(token)
        try:
            principal = Principal.from_claims(claims, internal_role=self.internal_role)
        except MalformedClaims as exc:
            raise InvalidToken(f"malformed claims: {exc}") from None
        self._remember(token, principal)
        return principal

    def _decode(self, token: str) -> dict[str, Any]:
        try:
            header = jwt.get_unverified_header(token)
            if header.get("alg") != "RS256":
                raise InvalidToken(f"algorithm {header.get('alg')!r} is not accepted (RS256)")
            kid = header.get("kid")
            if not isinstance(kid, str) or not kid:
                raise InvalidToken("the token names no signing key ('kid')")
            return jwt.decode(
                token,
                self.keys.key(kid),
                algorithms=["RS256"],
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": REQUIRED_CLAIMS},
            )
        except jwt.ExpiredSignatureError:
            raise InvalidToken("the token has expired") from None
        except jwt.InvalidAudienceError:
            raise InvalidToken(f"the token is not for audience {self.audience!r}") from None
        except jwt.InvalidIssuerError:
            raise InvalidToken(f"the token is not from issuer {self.issuer!r}") from None
        except jwt.InvalidSignatureError:
            raise InvalidToken("the token's signature does not verify") from None
        except jwt.PyJWTError as exc:
            raise InvalidToken(f"invalid token: {exc}") from None

    def _remember(self, token: str, principal: Principal) -> None:
        with self._lock:
            if len(self._cache) >= self._max_cached:
                now = self._clock()
                self._cache = {t: p for t, p in self._cache.items() if p.expires_at > now}
                if len(self._cache) >= self._max_cached:
                    self._cache.clear()  # all live: start over rather than grow without bound
            self._cache[token] = principal
