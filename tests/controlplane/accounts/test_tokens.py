"""Bearer-token refusals and the local issuer's keys: every refused token is a 401 with
the JSON error body; a verifier with a cached JWKS picks up a rotated key."""

from __future__ import annotations

import time
from typing import Any

import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from rest_framework.test import APIClient

from controlplane.accounts.identity import InvalidToken, LocalIdentity
from controlplane.accounts.tokens import JwksKeys, verify_token
from controlplane.core.errors import Unavailable
from tests.controlplane.api_base import make_tenant
from tests.controlplane.conftest import token_for

WHOAMI = "/api/v1/auth/whoami"


def _claims(identity: LocalIdentity, **overrides: object) -> dict[str, object]:
    now = int(time.time())
    claims: dict[str, object] = {
        "iss": identity.issuer,
        "sub": "someone",
        "aud": "meridian",
        "iat": now,
        "exp": now + 300,
        "preferred_username": "someone",
        "groups": ["/tenants/acme/tenant-admin"],
    }
    claims.update(overrides)
    return claims


def _call(token: str) -> tuple[int, dict[str, Any]]:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    response = client.get(WHOAMI)
    return response.status_code, response.json()


def _signed(identity: LocalIdentity, claims: dict[str, object]) -> str:
    kid, key = identity.signing_key()
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def test_a_valid_token_names_the_caller(db: None, local_identity: LocalIdentity) -> None:
    make_tenant("acme")
    token = token_for(local_identity, roles={"acme": "developer"}, username="alice")
    code, body = _call(token)
    assert code == 200
    assert body["name"] == "alice"
    assert body["tenants"] == [{"slug": "acme", "role": "developer"}]
    assert body["platform_admin"] is False


def _expired(identity: LocalIdentity) -> str:
    return _signed(
        identity, _claims(identity, iat=int(time.time()) - 600, exp=int(time.time()) - 60)
    )


def _wrong_audience(identity: LocalIdentity) -> str:
    return _signed(identity, _claims(identity, aud="someone-else"))


def _wrong_issuer(identity: LocalIdentity) -> str:
    return _signed(identity, _claims(identity, iss="https://evil.example/realms/meridian"))


def _forged_same_kid(identity: LocalIdentity) -> str:
    kid, _ = identity.signing_key()
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(_claims(identity), other, algorithm="RS256", headers={"kid": kid})


def _forged_unknown_kid(identity: LocalIdentity) -> str:
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return jwt.encode(_claims(identity), other, algorithm="RS256", headers={"kid": "made-up"})


def _alg_none(identity: LocalIdentity) -> str:
    return jwt.encode(_claims(identity), None, algorithm="none")  # type: ignore[arg-type]


def _hs256_with_public_key(identity: LocalIdentity) -> str:
    # The classic confusion attack: the public key (which anyone can fetch) as HMAC secret.
    jwk = identity.jwks()["keys"][0]
    secret = jwt.utils.base64url_decode(jwk["n"])
    return jwt.encode(_claims(identity), secret, algorithm="HS256", headers={"kid": jwk["kid"]})


def _no_expiry(identity: LocalIdentity) -> str:
    claims = _claims(identity)
    del claims["exp"]
    return _signed(identity, claims)


@pytest.mark.parametrize(
    ("make", "reason"),
    [
        (_expired, "expired"),
        (_wrong_audience, "audience"),
        (_wrong_issuer, "issuer"),
        (_forged_same_kid, "signature"),
        (_forged_unknown_kid, "unknown signing key"),
        (_alg_none, "'none' is not accepted"),
        (_hs256_with_public_key, "'HS256' is not accepted"),
        (_no_expiry, "exp"),
        (lambda identity: "not-a-jwt", "Not enough segments"),
    ],
    ids=[
        "expired",
        "wrong-audience",
        "wrong-issuer",
        "forged-signature",
        "unknown-key",
        "alg-none",
        "hs256",
        "no-expiry",
        "garbage",
    ],
)
def test_refused_tokens_are_401_with_the_error_body(
    db: None, local_identity: LocalIdentity, make: object, reason: str
) -> None:
    token = make(local_identity)  # type: ignore[operator]
    code, body = _call(token)
    assert code == 401
    assert body["error"]["code"] == "authentication_failed"
    assert reason.lower() in body["error"]["message"].lower()


def test_no_token_is_401(db: None) -> None:
    response = APIClient().get(WHOAMI)
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_verifier_picks_up_a_rotated_key(db: None, local_identity: LocalIdentity) -> None:
    """A second issuer instance (another process) rotates the key; the verifier's cached
    JWKS lacks the new kid, refreshes once, and accepts the token."""
    before = token_for(local_identity, username="before")
    assert local_identity.verify(before)["preferred_username"] == "before"  # JWKS now cached
    other_process = LocalIdentity()
    new_kid = other_process.rotate_signing_key()
    after = token_for(other_process, username="after")
    assert jwt.get_unverified_header(after)["kid"] == new_kid
    assert local_identity.verify(after)["preferred_username"] == "after"
    assert local_identity.verify(before)["preferred_username"] == "before"  # old key kept


def test_rotation_retires_keys_beyond_keep(db: None, local_identity: LocalIdentity) -> None:
    first = token_for(local_identity, username="first")
    local_identity.rotate_signing_key(keep=2)
    local_identity.rotate_signing_key(keep=2)
    assert len(local_identity.jwks()["keys"]) == 2
    with pytest.raises(InvalidToken, match="unknown signing key"):
        local_identity.verify(first)


def test_jwks_refresh_for_unknown_kids_is_rate_limited() -> None:
    now = [0.0]
    fetched: list[int] = []

    def fetch() -> dict[str, object]:
        fetched.append(1)
        return {"keys": []}

    cache = JwksKeys(fetch, ttl_s=300, min_refresh_interval_s=1.0, clock=lambda: now[0])
    for _ in range(5):
        with pytest.raises(InvalidToken):
            cache.key("made-up")
    assert len(fetched) == 2  # the first load, then one refresh for the unknown kid
    now[0] = 1.5
    with pytest.raises(InvalidToken):
        cache.key("made-up")
    assert len(fetched) == 3


def test_jwks_endpoint_serves_the_public_keys_only(db: None, local_identity: LocalIdentity) -> None:
    response = APIClient().get("/api/v1/auth/jwks.json")
    assert response.status_code == 200
    keys = response.json()["keys"]
    assert [k["kid"] for k in keys] == [local_identity.signing_key()[0]]
    assert {k["alg"] for k in keys} == {"RS256"}
    assert not any("d" in k or "p" in k for k in keys)  # no private parts


def test_an_issuer_outage_keeps_the_known_keys(db: None, local_identity: LocalIdentity) -> None:
    """The JWKS cannot be fetched: known keys keep verifying; with none, 503's error."""
    now = [0.0]
    up = [True]

    def fetch() -> dict[str, object]:
        if not up[0]:
            raise OSError("issuer down")
        return {"keys": [_public_jwk("k1")]}

    cache = JwksKeys(fetch, ttl_s=10, clock=lambda: now[0])
    assert cache.key("k1") is not None
    up[0], now[0] = False, 60.0  # past the TTL, the refresh fails
    assert cache.key("k1") is not None
    token = token_for(local_identity)
    with pytest.raises(Unavailable):
        verify_token(token, JwksKeys(fetch, ttl_s=10), issuer=local_identity.issuer)


def _public_jwk(kid: str) -> dict[str, object]:
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048).public_key()
    return {**jwt.algorithms.RSAAlgorithm.to_jwk(key, as_dict=True), "kid": kid}
