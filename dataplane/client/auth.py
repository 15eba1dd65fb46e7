"""Credentials for calls to brokers: bearer tokens from a token source.

A token source has ``token() -> str`` (blocking; a valid access token) and ``cached() ->
str | None`` (the current token if it is still good for ``refresh_margin_s``, else None,
never blocking), so an asyncio caller fetches off its event loop only when needed.

- ``StaticToken(token)``: a token obtained elsewhere (``--token``, ``MERIDIAN_TOKEN``).
- ``ClientCredentials(token_url, client_id, client_secret)``: the OAuth 2 client
  credentials grant (Keycloak's ``.../protocol/openid-connect/token`` or the control
  plane's ``/api/v1/auth/token``); a token is reused until ``refresh_margin_s`` before it
  expires, then a new one is fetched (should that fail, the old one serves while it is
  valid, and the issuer is asked again every ``RETRY_AFTER_FAILURE_S``). Thread-safe.

Every call then carries ``authorization: Bearer <token>`` metadata, added by the client
interceptors below (gRPC refuses call credentials on plaintext channels, interceptors
work on both). When no token can be had, the call fails as if the broker had refused it
(UNAUTHENTICATED, or BROKER_NOT_AVAILABLE when the issuer is unreachable).
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any, Protocol

import grpc
import grpc.aio

from dataplane.errors import ERROR_METADATA_KEY, ErrorCode, MeridianError

AUTHORIZATION_KEY = "authorization"
DEFAULT_REFRESH_MARGIN_S = 30.0
TOKEN_REQUEST_TIMEOUT_S = 10.0
RETRY_AFTER_FAILURE_S = 5.0


class TokenSource(Protocol):
    def token(self) -> str:
        """A valid access token (may block to fetch one)."""
        ...

    def cached(self) -> str | None:
        """The current token if still valid, without blocking; None otherwise."""
        ...


class StaticToken:
    """A fixed token; when it expires, calls fail with UNAUTHENTICATED."""

    def __init__(self, token: str) -> None:
        if not token:
            raise ValueError("an empty token")
        self._token = token

    def token(self) -> str:
        return self._token

    def cached(self) -> str:
        return self._token

    def __repr__(self) -> str:
        return "StaticToken(***)"


class ClientCredentials:
    """Tokens from the client-credentials grant at ``token_url``; see the module docstring.

    A failed token request raises ``MeridianError(UNAUTHENTICATED)`` (the issuer refused
    the client) or ``MeridianError(BROKER_NOT_AVAILABLE)`` (it could not be reached),
    carrying the issuer's answer."""

    def __init__(
        self,
        token_url: str,
        client_id: str,
        client_secret: str,
        *,
        refresh_margin_s: float = DEFAULT_REFRESH_MARGIN_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.token_url = token_url
        self.client_id = client_id
        self._secret = client_secret
        self._margin_s = refresh_margin_s
        self._clock = clock
        self._lock = threading.Lock()
        self._token: str | None = None
        self._expires_at = 0.0
        self._retry_at = 0.0  # after a failed refresh, the current token serves until then

    def cached(self) -> str | None:
        token, now = self._token, self._clock()
        if token is None or now >= self._expires_at:
            return None
        if now < self._expires_at - self._margin_s or now < self._retry_at:
            return token
        return None

    def token(self) -> str:
        with self._lock:
            current = self.cached()
            if current is not None:
                return current
            started = self._clock()
            try:
                token, expires_in_s = self._fetch()
            except MeridianError:
                if self._token is None or started >= self._expires_at:
                    raise
                # The issuer failed but the token in hand is still valid: use it, and ask
                # again only after a pause rather than on every call.
                self._retry_at = started + RETRY_AFTER_FAILURE_S
                return self._token
            # Half the lifetime at most as margin, so short-lived tokens are still reused.
            self._expires_at = started + expires_in_s
            self._margin_s = min(self._margin_s, expires_in_s / 2)
            self._token = token
            return token

    def _fetch(self) -> tuple[str, float]:
        return exchange_client_credentials(self.token_url, self.client_id, self._secret)

    def __repr__(self) -> str:
        return f"ClientCredentials({self.token_url!r}, {self.client_id!r})"


def exchange_client_credentials(
    token_url: str, client_id: str, client_secret: str
) -> tuple[str, float]:
    """One client-credentials grant at ``token_url``: (access token, seconds it lives).

    Raises ``MeridianError``: UNAUTHENTICATED when the issuer refused the client (400,
    401, 403), BROKER_NOT_AVAILABLE when it could not be reached or answered otherwise;
    the message carries the issuer's answer."""
    body = urllib.parse.urlencode(
        {"grant_type": "client_credentials", "client_id": client_id, "client_secret": client_secret}
    ).encode()
    request = urllib.request.Request(
        token_url, data=body, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    try:
        with urllib.request.urlopen(request, timeout=TOKEN_REQUEST_TIMEOUT_S) as response:
            answer: dict[str, Any] = json.loads(response.read())
        return str(answer["access_token"]), float(answer.get("expires_in", 300))
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode(errors="replace")
        refused = exc.code in (400, 401, 403)
        code = ErrorCode.UNAUTHENTICATED if refused else ErrorCode.BROKER_NOT_AVAILABLE
        raise MeridianError(
            code, f"token request for {client_id!r} refused ({exc.code}): {detail}"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise MeridianError(
            ErrorCode.BROKER_NOT_AVAILABLE, f"cannot reach {token_url}: {exc!r}"
        ) from None


Credentials = TokenSource | str | None


def token_source(credentials: Credentials) -> TokenSource | None:
    """``credentials`` as a token source: a string is a static token, None is none."""
    if credentials is None or credentials == "":
        return None
    if isinstance(credentials, str):
        return StaticToken(credentials)
    return credentials


class CredentialsError(grpc.RpcError):  # type: ignore[misc]
    """A call that never left: its token could not be had. Shaped like a failed call
    (``code()``, ``details()``, ``trailing_metadata()`` naming the ``ErrorCode``), so
    every caller's handling of failed calls applies."""

    def __init__(self, error: MeridianError) -> None:
        super().__init__(error.message)
        self.error = error

    def code(self) -> grpc.StatusCode:
        return self.error.grpc_status

    def details(self) -> str:
        return self.error.message

    def trailing_metadata(self) -> tuple[tuple[str, str], ...]:
        return ((ERROR_METADATA_KEY, self.error.code_name),)


def _fetch_token(source: TokenSource) -> str:
    try:
        return source.token()
    except MeridianError as exc:
        raise CredentialsError(exc) from None


def _aio_failure(error: MeridianError) -> grpc.aio.AioRpcError:
    return grpc.aio.AioRpcError(
        error.grpc_status,
        grpc.aio.Metadata(),
        grpc.aio.Metadata((ERROR_METADATA_KEY, error.code_name)),
        details=error.message,
    )


def bearer(token: str) -> tuple[str, str]:
    return (AUTHORIZATION_KEY, f"Bearer {token}")


def _with_token(metadata: Any, token: str) -> list[tuple[str, str]]:
    kept = [(k, v) for k, v in (metadata or ()) if k != AUTHORIZATION_KEY]
    return [*kept, bearer(token)]


# -- blocking channels ----------------------------------------------------------------------
class _CallDetails(grpc.ClientCallDetails):  # type: ignore[misc]
    def __init__(self, base: Any, metadata: list[tuple[str, str]]) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class BearerInterceptor(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[misc]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[misc]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[misc]
    grpc.StreamStreamClientInterceptor,  # type: ignore[misc]
):
    """Adds the source's bearer token to every call of a blocking channel."""

    def __init__(self, source: TokenSource) -> None:
        self.source = source

    def _details(self, details: Any) -> Any:
        return _CallDetails(details, _with_token(details.metadata, _fetch_token(self.source)))

    def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return continuation(self._details(details), request)

    def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)

    def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return continuation(self._details(details), requests)


# -- asyncio channels -----------------------------------------------------------------------
async def current_token(source: TokenSource) -> str:
    """The source's token, fetched in a thread when a new one is needed; a failure to
    get one raises ``grpc.aio.AioRpcError`` like a failed call."""
    token = source.cached()
    if token is None:
        try:
            token = await asyncio.get_running_loop().run_in_executor(None, source.token)
        except MeridianError as exc:
            raise _aio_failure(exc) from None
    return token


class _AioBearer:
    def __init__(self, source: TokenSource) -> None:
        self.source = source

    async def _details(self, details: grpc.aio.ClientCallDetails) -> grpc.aio.ClientCallDetails:
        token = await current_token(self.source)
        return details._replace(metadata=_with_token(details.metadata, token))


class _AioUnaryUnary(_AioBearer, grpc.aio.UnaryUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_unary(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(await self._details(details), request)


class _AioUnaryStream(_AioBearer, grpc.aio.UnaryStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_unary_stream(self, continuation: Any, details: Any, request: Any) -> Any:
        return await continuation(await self._details(details), request)


class _AioStreamUnary(_AioBearer, grpc.aio.StreamUnaryClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_unary(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(await self._details(details), requests)


class _AioStreamStream(_AioBearer, grpc.aio.StreamStreamClientInterceptor):  # type: ignore[misc]
    async def intercept_stream_stream(self, continuation: Any, details: Any, requests: Any) -> Any:
        return await continuation(await self._details(details), requests)


def aio_interceptors(source: TokenSource) -> list[grpc.aio.ClientInterceptor]:
    """Interceptors adding the source's bearer token to every call of an asyncio channel."""
    return [
        _AioUnaryUnary(source),
        _AioUnaryStream(source),
        _AioStreamUnary(source),
        _AioStreamStream(source),
    ]
