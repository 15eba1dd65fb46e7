"""A token issuer for broker tests: real RSA keys, a JWKS and a client-credentials token
endpoint served over HTTP on 127.0.0.1, tokens in the control plane's claim layout
(``groups`` ``/tenants/<slug>@<tenant id>/<role>``, ``realm_access.roles``, ``azp``;
a tenant's id is ``tenant_id(slug)`` unless a test names another).

    with TestIssuer() as issuer:
        issuer.jwks_url, issuer.token_url, issuer.issuer
        issuer.token(tenants={"acme": "developer"}, client_id="acme--app")
        issuer.internal_token()
        issuer.add_client("meridian-broker", "secret", internal=True)

It stands in for the control plane's local issuer and Keycloak where a test needs
tokens no real issuer would sign (expired, wrong audience, forged); the end-to-end tests
use the real ones.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import jwt
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa

from dataplane.client.claims import tenant_group

AUDIENCE = "meridian"
INTERNAL_ROLE = "meridian-internal"


def tenant_id(slug: str) -> str:
    """The id ``TestIssuer`` gives tenant ``slug`` by default (the same every run)."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"meridian-tenant:{slug}"))


def new_key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


class TestIssuer:
    """See the module docstring."""

    __test__ = False  # not a test class

    def __init__(self, issuer: str = "test-issuer") -> None:
        self.issuer = issuer
        self.key = new_key()
        self.kid = uuid.uuid4().hex
        self.clients: dict[str, tuple[str, dict[str, Any]]] = {}
        self.jwks_requests = 0
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> TestIssuer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> TestIssuer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    @property
    def jwks_url(self) -> str:
        return self.url + "/jwks.json"

    @property
    def token_url(self) -> str:
        return self.url + "/token"

    def broker_args(self) -> list[str]:
        """Broker flags turning authentication on against this issuer."""
        return ["--jwks-url", self.jwks_url, "--token-issuer", self.issuer]

    # -- tokens -------------------------------------------------------------------------
    def claims(
        self,
        *,
        tenants: dict[str, str] | None = None,
        client_id: str = "app",
        subject: str | None = None,
        realm_roles: list[str] | None = None,
        ttl_s: int = 600,
        tenant_ids: dict[str, str] | None = None,
        account_id: str | None = None,
    ) -> dict[str, Any]:
        now = int(time.time())
        ids = {slug: tenant_id(slug) for slug in tenants or {}} | (tenant_ids or {})
        return {
            "iss": self.issuer,
            "sub": subject or str(uuid.uuid5(uuid.NAMESPACE_URL, client_id)),
            "aud": AUDIENCE,
            "iat": now,
            "exp": now + ttl_s,
            "jti": uuid.uuid4().hex,
            "azp": client_id,
            "preferred_username": f"service-account-{client_id}",
            "groups": [
                f"{tenant_group(slug, ids[slug])}/{role}" for slug, role in (tenants or {}).items()
            ],
            "realm_access": {"roles": realm_roles or []},
            **({"account_id": account_id} if account_id else {}),
        }

    def sign(self, claims: dict[str, Any], key: Any = None, kid: str | None = None) -> str:
        return jwt.encode(
            claims, key or self.key, algorithm="RS256", headers={"kid": kid or self.kid}
        )

    def token(self, **kwargs: Any) -> str:
        return self.sign(self.claims(**kwargs))

    def internal_token(self, client_id: str = "meridian-controller") -> str:
        return self.token(client_id=client_id, realm_roles=[INTERNAL_ROLE])

    def add_client(
        self, client_id: str, secret: str, *, internal: bool = False, **claims: Any
    ) -> None:
        """A client the token endpoint accepts (client credentials)."""
        if internal:
            claims["realm_roles"] = [INTERNAL_ROLE]
        self.clients[client_id] = (secret, claims)

    def jwks(self) -> dict[str, Any]:
        jwk = jwt.algorithms.RSAAlgorithm.to_jwk(self.key.public_key(), as_dict=True)
        return {"keys": [{**jwk, "kid": self.kid, "use": "sig", "alg": "RS256"}]}

    def public_pem(self) -> bytes:
        return self.key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )

    # -- HTTP ---------------------------------------------------------------------------
    def _handler(self) -> type[BaseHTTPRequestHandler]:
        issuer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path != "/jwks.json":
                    self._send(404, {"error": "not found"})
                    return
                issuer.jwks_requests += 1
                self._send(200, issuer.jwks())

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                form = urllib.parse.parse_qs(self.rfile.read(length).decode())
                client_id = form.get("client_id", [""])[0]
                secret = form.get("client_secret", [""])[0]
                known = issuer.clients.get(client_id)
                if form.get("grant_type") != ["client_credentials"] or not known:
                    self._send(401, {"error": "invalid_client"})
                    return
                if known[0] != secret:
                    self._send(401, {"error": "invalid_client"})
                    return
                token = issuer.token(client_id=client_id, **known[1])
                self._send(200, {"access_token": token, "expires_in": known[1].get("ttl_s", 600)})

            def _send(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


def unsigned(claims: dict[str, Any]) -> str:
    """A token with ``alg: none`` (no signature)."""

    def part(value: dict[str, Any]) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part({'alg': 'none', 'typ': 'JWT'})}.{part(claims)}."


def hs256_with_public_key(issuer: TestIssuer, claims: dict[str, Any]) -> str:
    """The classic confusion attack: HS256 keyed with the issuer's public key (PEM)."""
    header = {"alg": "HS256", "typ": "JWT", "kid": issuer.kid}

    def part(value: dict[str, Any]) -> bytes:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=")

    signing_input = part(header) + b"." + part(claims)
    signature = hmac.new(issuer.public_pem(), signing_input, hashlib.sha256).digest()
    return (signing_input + b"." + base64.urlsafe_b64encode(signature).rstrip(b"=")).decode()
