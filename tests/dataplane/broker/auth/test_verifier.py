"""The verifier's key cache and token cache, and the authorizer's decisions, in process
(the broker tests cover the same code over gRPC; these pin the timing-free details)."""

from __future__ import annotations

import threading
import urllib.error
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.broker.auth.authorizer import CONSUME, PRODUCE, Authorizer, tenant_of
from dataplane.broker.auth.principal import Principal, reset_current, set_current
from dataplane.broker.auth.verifier import (
    MAX_JWKS_BYTES,
    InvalidToken,
    JwksKeys,
    JwksUnavailable,
    TokenVerifier,
    fetch_jwks,
)
from dataplane.client.claims import tenant_group
from dataplane.errors import ErrorCode
from tests.support.issuer import TestIssuer, new_key, tenant_id


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Jwks:
    """The issuer's JWKS as a fetch function that counts calls and can fail."""

    def __init__(self, issuer: TestIssuer) -> None:
        self.issuer = issuer
        self.calls = 0
        self.down = False

    def __call__(self) -> dict[str, Any]:
        self.calls += 1
        if self.down:
            raise OSError("connection refused")
        return self.issuer.jwks()


@pytest.fixture
def issuer() -> TestIssuer:
    return TestIssuer()  # not started: only its keys and claims are used


def _verifier(jwks: Jwks, clock: Clock) -> TokenVerifier:
    keys = JwksKeys(jwks, ttl_s=300, min_refresh_interval_s=1.0, clock=clock)
    return TokenVerifier(keys, issuer="test-issuer", audience="meridian", internal_role="internal")


def test_a_rotated_key_is_fetched_on_its_first_token(issuer: TestIssuer) -> None:
    jwks, clock = Jwks(issuer), Clock()
    verifier = _verifier(jwks, clock)
    verifier.verify(issuer.token(tenants={"acme": "viewer"}))
    issuer.key, issuer.kid = new_key(), "rotated"
    clock.now += 2
    principal = verifier.verify(issuer.token(tenants={"acme": "developer"}))
    assert principal.roles == {"acme": "developer"}
    assert jwks.calls == 2


def test_unknown_kids_refresh_the_keys_at_most_once_a_second(issuer: TestIssuer) -> None:
    jwks, clock = Jwks(issuer), Clock()
    verifier = _verifier(jwks, clock)
    claims = issuer.claims()
    for i in range(20):
        with pytest.raises(InvalidToken):
            verifier.verify(issuer.sign(claims, key=new_key(), kid=f"made-up-{i}"))
    assert jwks.calls == 2  # the first load, then one refresh for the first unknown kid


def test_known_keys_keep_verifying_through_an_issuer_outage(issuer: TestIssuer) -> None:
    jwks, clock = Jwks(issuer), Clock()
    verifier = _verifier(jwks, clock)
    verifier.verify(issuer.token())
    jwks.down = True
    clock.now += 3600  # the keys' ttl has passed: a refresh is attempted and fails
    assert verifier.verify(issuer.token(client_id="other")).client_id == "other"


def test_without_any_key_an_outage_is_not_a_bad_token(issuer: TestIssuer) -> None:
    jwks = Jwks(issuer)
    jwks.down = True
    with pytest.raises(JwksUnavailable):
        _verifier(jwks, Clock()).verify(issuer.token())


def test_keys_fetched_over_http_keep_serving_once_the_issuer_stops() -> None:
    """``JwksKeys.from_url`` against a live issuer; ttl 0, so every
    lookup fetches again: once the issuer is gone, the key already known still verifies,
    and a cache that never reached it reports the outage, not a bad token."""
    issuer = TestIssuer().start()
    keys = JwksKeys.from_url(issuer.jwks_url, ttl_s=0.0)
    verifier = TokenVerifier(keys, issuer="test-issuer", audience="meridian", internal_role="r")
    verifier.verify(issuer.token())
    issuer.stop()
    assert verifier.verify(issuer.token(client_id="later")).client_id == "later"
    with pytest.raises(JwksUnavailable):
        JwksKeys.from_url(issuer.jwks_url).key(issuer.kid)


def test_an_oversized_or_redirecting_jwks_is_an_outage_not_a_memory_sink() -> None:
    """At most MAX_JWKS_BYTES are read from the issuer, and no redirect is followed."""
    huge = b'{"keys": [' + b" " * (MAX_JWKS_BYTES + 10) + b"]}"

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/moved":
                self.send_response(302)
                self.send_header("Location", "/huge")
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(huge)))
            self.end_headers()
            self.wfile.write(huge)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        with pytest.raises(ValueError, match="larger than"):
            fetch_jwks(f"{base}/huge")
        with pytest.raises(urllib.error.HTTPError, match="302"):
            fetch_jwks(f"{base}/moved")
        with pytest.raises(JwksUnavailable):
            JwksKeys.from_url(f"{base}/huge").key("any")
    finally:
        server.shutdown()
        server.server_close()


def test_a_verified_token_is_served_from_the_cache_until_it_expires(issuer: TestIssuer) -> None:
    jwks = Jwks(issuer)
    keys = JwksKeys(jwks)
    wall = Clock()
    wall.now = float(issuer.claims()["iat"])
    verifier = TokenVerifier(
        keys, issuer="test-issuer", audience="meridian", internal_role="r", wall_clock=wall
    )
    token = issuer.token(ttl_s=60)
    assert verifier.cached(token) is None
    principal = verifier.verify(token)
    assert verifier.cached(token) is principal
    wall.now += 61
    assert verifier.cached(token) is None


def test_claims_become_a_principal(issuer: TestIssuer) -> None:
    claims = issuer.claims(
        tenants={"acme": "viewer"}, client_id="acme--x", realm_roles=["platform-admin"]
    )
    acme, beta = tenant_group("acme", tenant_id("acme")), tenant_group("beta", tenant_id("beta"))
    claims["groups"] += [f"{acme}/developer", "/elsewhere/x", f"{beta}/owner"]
    claims["groups"] += ["/tenants/gamma/tenant-admin"]  # no tenant id: no role
    principal = Principal.from_claims(claims, internal_role="internal")
    assert principal.roles == {"acme": "developer"}  # the strongest; unknown roles ignored
    assert principal.tenant_ids == {"acme": tenant_id("acme")}
    assert principal.platform_admin
    assert not principal.internal
    assert principal.names == ("acme--x", claims["sub"])


@pytest.mark.parametrize(
    ("name", "tenant"),
    [("acme.orders", "acme"), ("acme.orders~eu", "acme"), ("__consumer_offsets", None),
     ("orders", None), (".orders", None), ("acme.", None)],
)  # fmt: skip
def test_the_tenant_of_a_name(name: str, tenant: str | None) -> None:
    assert tenant_of(name) == tenant


def test_an_authorizer_refuses_a_call_without_a_principal() -> None:
    authorizer = Authorizer()
    error = authorizer.topic_error("acme.orders", CONSUME)
    assert error is not None
    assert error.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED


def test_acl_entries_name_principals_by_client_id_or_subject() -> None:
    entries = [admin_pb2.AclEntry(principal="subject-7", operations=["produce"])]
    authorizer = Authorizer(lambda topic: entries if topic == "acme.orders" else [])
    caller = Principal(subject="subject-7", client_id="acme--app", roles={"acme": "developer"})
    token = set_current(caller)
    try:
        assert authorizer.topic_error("acme.orders", PRODUCE) is None
        assert authorizer.topic_error("acme.orders", CONSUME) is not None
        assert authorizer.topic_error("acme.other", CONSUME) is None
    finally:
        reset_current(token)
