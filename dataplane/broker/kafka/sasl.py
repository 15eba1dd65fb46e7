"""SASL on the Kafka listener: OAUTHBEARER (RFC 7628) and PLAIN (RFC 4616).

Both end in a bearer token that the broker's one ``Authenticator`` verifies, exactly as
it verifies the ``authorization`` metadata of a gRPC call, so a Kafka client and a gRPC
client with the same credentials are the same ``Principal``:

- OAUTHBEARER carries the token itself: the client's first message is the GS2 header
  ``n,[a=authzid],`` then ``\\x01``-separated ``key=value`` pairs, ``auth=Bearer <JWT>``
  among them, ended by ``\\x01\\x01``;
- PLAIN carries ``[authzid] \\x00 client_id \\x00 secret``: a service account's client id
  and secret, which the broker exchanges for a token at ``token_url`` with the
  client-credentials grant (``ClientCredentials``, the SDK's own). Exchanged tokens are
  kept per (client id, secret digest) until their refresh margin, so reconnecting clients
  do not each cost a round trip to the issuer; a refused secret is never kept. An authzid
  other than empty or the client id itself is refused: a caller cannot act for another.

A message that does not parse is ``SaslError``; the listener answers
SASL_AUTHENTICATION_FAILED with its message and closes the connection.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections import OrderedDict
from concurrent.futures import Executor

from dataplane.client.auth import ClientCredentials

OAUTHBEARER = "OAUTHBEARER"
PLAIN = "PLAIN"
MAX_AUTH_BYTES = 64 * 1024  # a JWT is a few KiB
MAX_EXCHANGED = 1024  # client credentials whose tokens are kept


class SaslError(Exception):
    """Authentication bytes that do not follow their mechanism."""


def oauthbearer_token(auth_bytes: bytes) -> str:
    """The bearer token of an OAUTHBEARER client message."""
    _check_size(auth_bytes)
    try:
        text = auth_bytes.decode("utf-8")
    except UnicodeDecodeError:
        raise SaslError("the OAUTHBEARER message is not UTF-8") from None
    header, sep, rest = text.partition("\x01")
    if not sep or not header.startswith("n,") or not header.endswith(","):
        raise SaslError("the OAUTHBEARER message lacks its GS2 header 'n,,'")
    if not rest.endswith("\x01"):
        raise SaslError("the OAUTHBEARER message is not terminated by \\x01\\x01")
    pairs = {}
    for item in rest[:-1].split("\x01"):
        if not item:
            continue
        key, eq, value = item.partition("=")
        if not eq:
            raise SaslError(f"OAUTHBEARER key-value {key[:40]!r} has no '='")
        pairs[key] = value
    auth = pairs.get("auth", "")
    scheme, _, token = auth.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        raise SaslError("the OAUTHBEARER message has no 'auth=Bearer <token>'")
    return token.strip()


def plain_credentials(auth_bytes: bytes) -> tuple[str, str]:
    """(client id, secret) of a PLAIN message."""
    _check_size(auth_bytes)
    parts = auth_bytes.split(b"\x00")
    if len(parts) != 3:
        raise SaslError("a PLAIN message is authzid \\0 username \\0 password")
    try:
        authzid, username, password = (p.decode("utf-8") for p in parts)
    except UnicodeDecodeError:
        raise SaslError("the PLAIN message is not UTF-8") from None
    if not username or not password:
        raise SaslError("PLAIN needs a username (the client id) and a password (its secret)")
    if authzid and authzid != username:
        raise SaslError("PLAIN authorization as another identity is not allowed")
    return username, password


def _check_size(auth_bytes: bytes) -> None:
    if len(auth_bytes) > MAX_AUTH_BYTES:
        raise SaslError(f"authentication bytes over {MAX_AUTH_BYTES}")


class PlainExchange:
    """Service-account credentials to tokens at ``token_url`` (see the module docstring).

    ``token`` raises ``MeridianError`` (UNAUTHENTICATED: the issuer refused the secret;
    BROKER_NOT_AVAILABLE: it could not be reached). Thread safety: event-loop only; each
    exchange runs on ``executor``.
    """

    def __init__(self, token_url: str, executor: Executor | None = None) -> None:
        self.token_url = token_url
        self._executor = executor
        self._sources: OrderedDict[tuple[str, str], ClientCredentials] = OrderedDict()

    async def token(self, client_id: str, secret: str) -> str:
        key = (client_id, hashlib.sha256(secret.encode()).hexdigest())
        source = self._sources.get(key)
        if source is None:
            source = ClientCredentials(self.token_url, client_id, secret)
        cached = source.cached()
        if cached is not None:
            self._sources.move_to_end(key)
            return cached
        loop = asyncio.get_running_loop()
        token = await loop.run_in_executor(self._executor, source.token)  # raises if refused
        self._sources[key] = source
        self._sources.move_to_end(key)
        while len(self._sources) > MAX_EXCHANGED:
            self._sources.popitem(last=False)
        return token
