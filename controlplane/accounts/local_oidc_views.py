"""The local issuer's OpenID Connect endpoints for people (``accounts.local_oidc``):
authorize (with the sign-in form), userinfo, end-session and the discovery document;
the token endpoint is the issuer's one (``api.views.TokenView``), which hands the
``authorization_code`` and ``refresh_token`` grants to ``local_oidc``. With Keycloak
as the identity provider they answer 404, as the client-credentials endpoint does.

The issuer's own sign-in is a mark in the Django session (``ISSUER_SESSION_KEY``, the
signed-in ``LocalUser``), apart from whatever the console keeps there: the authorization
endpoint skips the form while it is set, and end-session removes it."""

from __future__ import annotations

from typing import Any

import jwt
from authlib.oauth2 import OAuth2Error
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_http_methods

from controlplane.accounts.clients import console_client_id, console_signed_out_uri
from controlplane.accounts.identity import InvalidToken, LocalIdentity, get_identity
from controlplane.accounts.local_oidc import (
    SCOPES,
    authenticate,
    record_failed_sign_in,
    server,
    sign_in_refusal,
)
from controlplane.accounts.models import LocalUser

ISSUER_SESSION_KEY = "local_issuer_user"


def _local() -> LocalIdentity | None:
    identity = get_identity()
    return identity if isinstance(identity, LocalIdentity) else None


def _not_here() -> JsonResponse:
    message = "the identity provider is Keycloak: use the realm's OpenID Connect endpoints"
    return JsonResponse({"error": "not_found", "detail": message}, status=404)


def _signed_in(request: HttpRequest) -> LocalUser | None:
    pk = request.session.get(ISSUER_SESSION_KEY)
    return LocalUser.objects.filter(pk=pk).first() if pk is not None else None


@never_cache
@require_http_methods(["GET", "POST"])
def authorize(request: HttpRequest) -> HttpResponse:
    """GET: validates the request (client, redirect URI, PKCE S256) and, for a person
    signed in here, redirects back with a code; else shows the sign-in form. POST (the
    form, CSRF-checked): a right password signs the person in here and starts again."""
    if _local() is None:
        return _not_here()
    if request.method == "POST":
        return _sign_in(request)
    user = _signed_in(request)
    response: HttpResponse
    try:
        grant = server().get_consent_grant(request, end_user=user)
    except OAuth2Error as error:
        response = server().handle_error_response(request, error)
        return response
    if user is None or request.GET.get("prompt") == "login":
        return _form(request)
    response = server().create_authorization_response(request, grant_user=user, grant=grant)
    return response


def _sign_in(request: HttpRequest) -> HttpResponse:
    """A limited number of failed attempts per username and per client address in a
    window (``LOCAL_SIGN_IN_*`` settings); past it, even the right password is refused
    until the window ends, without checking it."""
    username = request.POST.get("username", "")
    address = request.META.get("REMOTE_ADDR") or "unknown"
    wait_s = sign_in_refusal(username, address)
    if wait_s is not None:
        minutes = max(1, -(-wait_s // 60))
        error = f"Too many failed sign-ins. Try again in {minutes} minute(s)."
        response = _form(request, error=error, status=429)
        response["Retry-After"] = str(wait_s)
        return response
    user = authenticate(username, request.POST.get("password", ""))
    if user is None:
        record_failed_sign_in(username, address)
        return _form(request, error="Wrong username or password.", status=401)
    request.session.cycle_key()  # a new session id once signed in (no fixation)
    request.session[ISSUER_SESSION_KEY] = user.pk
    query = request.GET.copy()
    query.pop("prompt", None)  # signed in now: the code is the next answer
    return HttpResponseRedirect(f"{request.path}?{query.urlencode()}")


def _form(request: HttpRequest, *, error: str = "", status: int = 200) -> HttpResponse:
    context = {"error": error, "username": request.POST.get("username", "")}
    return render(request, "accounts/sign_in.html", context, status=status)


@csrf_exempt
@require_http_methods(["GET", "POST"])
def userinfo(request: HttpRequest) -> HttpResponse:
    """The claims of the bearer of a local access token."""
    identity = _local()
    if identity is None:
        return _not_here()
    scheme, _, access_token = request.headers.get("Authorization", "").partition(" ")
    try:
        if scheme.lower() != "bearer":
            raise InvalidToken("expected 'Authorization: Bearer <token>'")
        claims = identity.verify(access_token.strip())
    except InvalidToken:
        response = JsonResponse({"error": "invalid_token"}, status=401)
        response["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return response
    keep = ("sub", "preferred_username", "groups", "realm_access")
    return JsonResponse({k: claims[k] for k in keep if k in claims})


@never_cache
@require_http_methods(["GET", "POST"])
def end_session(request: HttpRequest) -> HttpResponse:
    """RP-initiated logout. A GET carrying an ``id_token_hint`` this issuer signed for
    the console, for the person signed in here, ends the issuer's session at once;
    anything else asks first (a POST of the confirmation form, CSRF-checked), so
    another site cannot sign a person out.
    Afterwards the browser goes to the console's signed-out page when that is the
    ``post_logout_redirect_uri``."""
    identity = _local()
    if identity is None:
        return _not_here()
    hinted = _id_token_subject(identity, request.GET.get("id_token_hint", ""))
    if request.method == "GET" and not _hint_names_this_session(request, hinted):
        return render(request, "accounts/sign_out.html")
    request.session.pop(ISSUER_SESSION_KEY, None)
    request.session.cycle_key()
    target = request.GET.get("post_logout_redirect_uri") or request.POST.get(
        "post_logout_redirect_uri", ""
    )
    if target == console_signed_out_uri():
        return redirect(target)
    return render(request, "accounts/signed_out.html")


def _hint_names_this_session(request: HttpRequest, subject: str | None) -> bool:
    """Whether the hint names the person signed in here (or nobody is): another
    person's ID token, sent in a link, must not end this session without asking."""
    if subject is None:
        return False
    signed_in = request.session.get(ISSUER_SESSION_KEY)
    return signed_in is None or LocalUser.objects.filter(pk=signed_in, subject=subject).exists()


def _id_token_subject(identity: LocalIdentity, hint: str) -> str | None:
    """The subject of an ID token this issuer signed for the console (expired or not:
    a hint names who is signing out, it grants nothing), else None."""
    if not hint:
        return None
    try:
        header = jwt.get_unverified_header(hint)
        keys = {k["kid"]: k for k in identity.jwks()["keys"]}
        key = jwt.PyJWK(keys[header.get("kid")]).key
        claims = jwt.decode(
            hint,
            key,
            algorithms=["RS256"],
            audience=console_client_id(),
            issuer=identity.issuer,
            options={"verify_exp": False},
        )
    except (jwt.PyJWTError, KeyError):
        return None
    return str(claims.get("sub", "")) or None


@require_http_methods(["GET"])
def discovery(request: HttpRequest) -> HttpResponse:
    """``/.well-known/openid-configuration`` of the local issuer."""
    identity = _local()
    if identity is None:
        return _not_here()
    return JsonResponse(provider_metadata(identity))


def provider_metadata(identity: LocalIdentity) -> dict[str, Any]:
    endpoints = identity.oidc_endpoints()
    return {
        "issuer": identity.issuer,
        "authorization_endpoint": endpoints.authorization,
        "token_endpoint": endpoints.token,
        "userinfo_endpoint": endpoints.userinfo,
        "jwks_uri": endpoints.jwks,
        "end_session_endpoint": endpoints.end_session,
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token", "client_credentials"],
        "code_challenge_methods_supported": ["S256"],
        "subject_types_supported": ["public"],
        "id_token_signing_alg_values_supported": ["RS256"],
        "scopes_supported": list(SCOPES),
        "token_endpoint_auth_methods_supported": [
            "none",
            "client_secret_basic",
            "client_secret_post",
        ],
        "claims_supported": ["sub", "preferred_username", "groups", "realm_access"],
    }
