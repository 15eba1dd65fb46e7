"""Offline verification of RS256 bearer tokens against the issuer's JWKS (DESIGN
decision 7): the one verifier of the brokers and the control plane, for Keycloak's tokens
and the local issuer's alike.

``verify_rs256(token, keys, issuer=, audience=)`` returns the token's claims once: the
header names RS256 (``none``, HS256 and every other algorithm are refused before any key
is looked up) and a ``kid`` the JWKS has; the signature checks out; ``exp``, ``iat``,
``sub``, ``iss`` and ``aud`` are present, ``iss`` is the issuer, ``aud`` contains the
audience and the token has not expired (``LEEWAY_S`` of clock skew). Anything else
raises ``InvalidToken`` with a message saying why. ``TokenVerifier`` (the broker's) also
checks every claim's type (``dataplane.client.claims``: ``realm_access`` an object,
``groups`` a list of strings...) into a ``Principal``, and caches verified tokens until
they expire (bounded by ``max_cached_tokens``), so a client's every call costs one dict
lookup instead of an RSA verification.

Keys (``JwksKeys``) are fetched by ``fetch_jwks`` (``JwksKeys.from_url``: no redirects,
at most ``MAX_JWKS_BYTES`` read, which PyJWT's ``PyJWKClient`` does not bound; or by any
function returning a JWKS document, as the local issuer reads its own database) and
parsed by PyJWT (``PyJWKSet``); the cache policy is ours, since ``PyJWKClient``'s drops
every key on an outage and waits out a cooldown after every fetch before a rotated key is
looked up. Only RSA signing keys for RS256 are kept. They are fetched when first needed,
kept ``ttl_s``, and fetched again when a token names an unknown ``kid`` (a key rotation),
at most once per ``min_refresh_interval_s`` so made-up kids cannot hammer the issuer.
When the issuer cannot be reached, the keys already known keep serving, so an outage
logs no one out; with none known, ``JwksUnavailable`` (not a bad token: retry later).
Blocking (HTTP, RSA): call it off the event loop. Thread-safe.
"""

from __future__ import annotations

import http.client
import json
import logging
import threading
import time
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

import jwt

from dataplane.broker.auth.principal import Principal
from dataplane.client.claims import MalformedClaims

log = logging.getLogger(__name__)

LEEWAY_S = 5
REQUIRED_CLAIMS = ["exp", "iat", "sub", "aud", "iss"]
JWKS_TIMEOUT_S = 5.0
# What a fetch raises when the issuer cannot be reached or answers nonsense: PyJWKClient
# raises PyJWKClientError subclasses, and a fetch function may raise OSError (network)
# or ValueError (a document that is not JSON).
FETCH_ERRORS = (jwt.PyJWKClientError, OSError, ValueError, http.client.HTTPException)
MAX_JWKS_BYTES = 1 << 20  # every read has a byte limit; a JWKS is a few KiB

Fetch = Callable[[], Mapping[str, Any]]


class InvalidToken(Exception):  # noqa: N818 (the name the control plane uses too)
    """A bearer token that is malformed, forged, expired or not for this cluster."""


class JwksUnavailable(Exception):  # noqa: N818
    """The JWKS could not be fetched and no key is known yet."""


class JwksKeys:
    """RSA signing keys by ``kid``, from ``fetch()``; see the module docstring."""

    def __init__(
        self,
        fetch: Fetch,
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
        self._keys: dict[str, jwt.PyJWK] = {}
        self._loaded_at: float | None = None
        self._forced_at = float("-inf")  # the last refresh an unknown kid caused

    @classmethod
    def from_url(
        cls, url: str, *, ttl_s: float = 300.0, timeout_s: float = JWKS_TIMEOUT_S
    ) -> JwksKeys:
        """Keys from the JWKS at ``url`` (http or https; redirects are not followed; at
        most ``MAX_JWKS_BYTES`` are read)."""
        return cls(lambda: fetch_jwks(url, timeout_s), ttl_s=ttl_s)

    def key(self, kid: str) -> jwt.PyJWK:
        """The public key named ``kid``; ``InvalidToken`` if the issuer has none,
        ``JwksUnavailable`` if it cannot be asked and no key is known."""
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
        """Fetch the keys again at the next lookup (the issuer rotated them)."""
        with self._lock:
            self._loaded_at = None

    def _load(self, now: float) -> None:
        try:
            document = self._fetch()
        except FETCH_ERRORS as exc:
            if not self._keys:
                raise JwksUnavailable(f"cannot fetch the issuer's keys: {exc}") from exc
            log.warning("cannot refresh the JWKS (%s); verifying with the keys known", exc)
            self._loaded_at = now
            return
        self._keys = _rs256_signing_keys(document)
        self._loaded_at = now


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None  # a 3xx is then an HTTPError: the configured URL is the issuer's


def fetch_jwks(url: str, timeout_s: float = JWKS_TIMEOUT_S) -> dict[str, Any]:
    """The JSON object at ``url``; ``ValueError`` past ``MAX_JWKS_BYTES`` or when it is
    not a JSON object, ``OSError`` when the issuer cannot be asked."""
    opener = urllib.request.build_opener(_NoRedirects())
    request = urllib.request.Request(url, headers={"Accept": "application/json"})
    with opener.open(request, timeout=timeout_s) as response:
        body = response.read(MAX_JWKS_BYTES + 1)
    if len(body) > MAX_JWKS_BYTES:
        raise ValueError(f"the JWKS at {url} is larger than {MAX_JWKS_BYTES} bytes")
    document = json.loads(body)
    if not isinstance(document, dict):
        raise ValueError(f"the JWKS at {url} is not a JSON object")
    return document


def _rs256_signing_keys(document: Mapping[str, Any]) -> dict[str, jwt.PyJWK]:
    try:
        jwk_set = jwt.PyJWKSet.from_dict(dict(document))
    except jwt.PyJWKSetError:
        return {}  # no usable key at all: every kid is unknown
    return {
        key.key_id: key
        for key in jwk_set.keys
        if key.key_id
        and key.key_type == "RSA"
        and key.public_key_use in ("sig", None)
        and key.algorithm_name == "RS256"
    }


def verify_rs256(token: str, keys: JwksKeys, *, issuer: str, audience: str) -> dict[str, Any]:
    """The token's claims; ``InvalidToken`` or ``JwksUnavailable`` (see the module
    docstring)."""
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != "RS256":
            raise InvalidToken(f"algorithm {header.get('alg')!r} is not accepted (RS256)")
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("the token names no signing key ('kid')")
        return jwt.decode(
            token,
            keys.key(kid),
            algorithms=["RS256"],
            audience=audience,
            issuer=issuer,
            leeway=LEEWAY_S,
            options={"require": REQUIRED_CLAIMS},
        )
    except jwt.ExpiredSignatureError:
        raise InvalidToken("the token has expired") from None
    except jwt.InvalidAudienceError:
        raise InvalidToken(f"the token is not for audience {audience!r}") from None
    except jwt.InvalidIssuerError:
        raise InvalidToken(f"the token is not from issuer {issuer!r}") from None
    except jwt.InvalidSignatureError:
        raise InvalidToken("the token's signature does not verify") from None
    except jwt.PyJWTError as exc:
        raise InvalidToken(f"invalid token: {exc}") from None


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
        claims = verify_rs256(token, self.keys, issuer=self.issuer, audience=self.audience)
        try:
            principal = Principal.from_claims(claims, internal_role=self.internal_role)
        except MalformedClaims as exc:
            raise InvalidToken(f"malformed claims: {exc}") from None
        self._remember(token, principal)
        return principal

    def _remember(self, token: str, principal: Principal) -> None:
        with self._lock:
            if len(self._cache) >= self._max_cached:
                now = self._clock()
                self._cache = {t: p for t, p in self._cache.items() if p.expires_at > now}
                if len(self._cache) >= self._max_cached:
                    self._cache.clear()  # all live: start over rather than grow without bound
            self._cache[token] = principal
