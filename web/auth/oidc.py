"""mozilla-django-oidc fitted to the identity provider: its endpoint settings come from
``get_identity().oidc_endpoints()`` (Keycloak's realm or the local issuer, one code
path), the Django user's username is the token's ``sub`` (``Membership.subject``), the
ID token's issuer and audience are checked, and the session keeps, beside mozilla's
``oidc_access_token`` and ``oidc_id_token``, the refresh token and the access token's
expiry (``session.py``)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend
from mozilla_django_oidc.utils import import_from_settings
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from controlplane.accounts.clients import console_client_id, console_signed_out_uri
from controlplane.accounts.identity import get_identity
from web.auth import session

# mozilla-django-oidc's endpoint settings, answered by the identity provider.
_ENDPOINT_SETTINGS = {
    "OIDC_OP_AUTHORIZATION_ENDPOINT": "authorization",
    "OIDC_OP_TOKEN_ENDPOINT": "token",
    "OIDC_OP_USER_ENDPOINT": "userinfo",
    "OIDC_OP_JWKS_ENDPOINT": "jwks",
}


def provider_setting(attr: str, *args: Any) -> Any:
    """A mozilla-django-oidc setting: endpoints from the identity provider, the rest
    from Django's settings."""
    if attr in _ENDPOINT_SETTINGS:
        return getattr(get_identity().oidc_endpoints(), _ENDPOINT_SETTINGS[attr])
    return import_from_settings(attr, *args)


class ConsoleOIDCBackend(OIDCAuthenticationBackend):  # type: ignore[misc]
    """Signs a person in from the provider's tokens; their Django user is named by the
    token's ``sub``."""

    get_settings = staticmethod(provider_setting)

    def get_token(self, payload: dict[str, Any]) -> dict[str, Any]:
        token_info: dict[str, Any] = super().get_token(payload)
        self.token_info = token_info
        return token_info

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        """mozilla-django-oidc checks the signature and nonce; the issuer and audience
        are checked here."""
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        if payload.get("iss") != get_identity().issuer or console_client_id() not in audiences:
            raise SuspiciousOperation("ID token from another issuer or for another client")
        return payload

    def get_userinfo(self, access_token: str, id_token: str, payload: Any) -> dict[str, Any]:
        info: dict[str, Any] = super().get_userinfo(access_token, id_token, payload)
        if info.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("userinfo names another subject than the ID token")
        return info

    def store_tokens(self, access_token: str, id_token: str) -> None:
        super().store_tokens(access_token, id_token)
        session.store_tokens(self.request.session, self.token_info)

    def verify_claims(self, claims: dict[str, Any]) -> bool:
        return bool(claims.get("sub"))

    def filter_users_by_claims(self, claims: dict[str, Any]) -> Any:
        return self.UserModel.objects.filter(username=claims["sub"])

    def create_user(self, claims: dict[str, Any]) -> User:
        user: User = self.UserModel.objects.create_user(claims["sub"])
        return user


class ConsoleLoginView(OIDCAuthenticationRequestView):  # type: ignore[misc]
    """Sends the browser to the provider with a PKCE challenge, a state and a nonce."""

    get_settings = staticmethod(provider_setting)


class ConsoleCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]
    """Takes the code back, redeems it with the verifier and signs the person in."""

    get_settings = staticmethod(provider_setting)


def provider_logout_url(request: HttpRequest) -> str:
    """The provider's end-session URL for this session (RP-initiated logout): its ID
    token as the hint, back to the console's signed-out page afterwards."""
    params = {
        "client_id": console_client_id(),
        "post_logout_redirect_uri": console_signed_out_uri(),
    }
    id_token = request.session.get("oidc_id_token")
    if id_token:
        params["id_token_hint"] = id_token
    return f"{get_identity().oidc_endpoints().end_session}?{urlencode(params)}"
