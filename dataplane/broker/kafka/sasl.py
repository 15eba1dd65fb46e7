"""SASL on the Kafka listener: OAUTHBEARER (RFC 7628) and PLAIN (RFC 4616).

Both end in a bearer token that the broker's one ``Authenticator`` verifies, exactly as
it verifies the ``authorization`` metadata of a gRPC call, so a Kafka client and a gRPC
client with the same credentials are the same ``Principal``:

- OAUTHBEARER carries the token itself: the client's first message is the GS2 header
  ``n,[a=authzid],`` then ``\\x01``-separated ``key=value`` pairs, ``auth=Bearer <JWT>``
  among them, ended by ``\\x01\\x01``;
- PLAIN carries ``[authzid] \\x00 client_id \\x00 secret``: a service account's client id
  and secret, which the broker exchanges for a token at ``token_url`` with the
  client-credentials grant (``exchange_client_credentials``, the SDK's own). A secret the
  issuer accepted is trusted again without asking for ``PLAIN_RECHECK_S`` (so clients
  reconnecting at once do not each cost a round trip), then asked anew: a rotated or
  revoked secret stops opening sessions within that time. Only an issuer that cannot be
  reached lets a recently accepted secret's unexpired token serve meanwhile; a refused
  secret is never kept. At most ``MAX_CONCURRENT_EXCHANGES`` exchanges run at once, on
  threads of their own (never the broker's I/O pool); more are turned away as busy. An
  authzid other than empty or the client id itself is refused: a caller cannot act for
  another.

A message that does not parse is ``SaslError``; the listener answers
SASL_AUTHENTICATION_FAILED with its message and closes the connection.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from dataplane.client.auth import exchange_client_credentials
from dataplane.errors import ErrorCode, MeridianError

OAUTHBEARER = "OAUTHBEARER"
PLAIN = "PLAIN"
MAX_AUTH_BYTES = 64 * 1024  # a JWT is a few KiB
MAX_EXCHANGED = 1024  # client credentials whose tokens are kept
PLAIN_RECHECK_S = 30.0  # a secret the issuer accepted is asked again after this
MAX_CONCURRENT_EXCHANGES = 4
TOKEN_MARGIN_S = 10.0  # a token this close to its expiry is not handed to a new session


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

    ``token`` raises ``MeridianError``: UNAUTHENTICATED (the issuer refused the secret),
    BROKER_NOT_AVAILABLE (it could not be reached, or too many exchanges are under way).
    Thread safety: event-loop only; each exchange runs on the exchange's own threads.
    """

    def __init__(
        self,
        token_url: str,
        *,
        clock: Callable[[], float] = time.monotonic,
        exchange: Callable[[str, str, str], tuple[str, float]] = exchange_client_credentials,
    ) -> None:
        self.token_url = token_url
        self._clock = clock
        self._exchange = exchange
        self._executor = ThreadPoolExecutor(
            MAX_CONCURRENT_EXCHANGES, thread_name_prefix="sasl-plain"
        )
        self._running = 0
        self._accepted: OrderedDict[tuple[str, str], _Accepted] = OrderedDict()

    async def token(self, client_id: str, secret: str) -> str:
        key = (client_id, hashlib.sha256(secret.encode()).hexdigest())
        now = self._clock()
        known = self._accepted.get(key)
        if known is not None and now < known.checked_at + PLAIN_RECHECK_S and known.live(now):
            self._accepted.move_to_end(key)
            return known.token
        if self._running >= MAX_CONCURRENT_EXCHANGES:
            raise MeridianError(
                ErrorCode.BROKER_NOT_AVAILABLE, "too many SASL/PLAIN exchanges under way"
            )
        self._running += 1
        try:
            loop = asyncio.get_running_loop()
            token, lifetime_s = await loop.run_in_executor(
                self._executor, self._exchange, self.token_url, client_id, secret
            )
        except MeridianError as exc:
            if exc.code == ErrorCode.UNAUTHENTICATED:
                self._accepted.pop(key, None)
            elif known is not None and known.live(self._clock()):
                return known.token  # the issuer is away; its last word still holds
            raise
        finally:
            self._running -= 1
        self._accepted[key] = _Accepted(token, now, now + lifetime_s)
        self._accepted.move_to_end(key)
        while len(self._accepted) > MAX_EXCHANGED:
            self._accepted.popitem(last=False)
        return token

    def close(self) -> None:
        self._executor.shutdown(wait=False, cancel_futures=True)


@dataclass(frozen=True)
class _Accepted:
    """A secret the issuer accepted at ``checked_at``, and the token it gave."""

    token: str
    checked_at: float
    expires_at: float

    def live(self, now: float) -> bool:
        return now < self.expires_at - TOKEN_MARGIN_S
