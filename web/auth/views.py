"""The console's sign-in pages: the session page (who is signed in, with which tenant
roles, read from the session's token as the API reads a bearer token), the landing pages
after a failed sign-in and after signing out, and logout (POST only, CSRF-checked),
which ends the provider's session too (``oidc.provider_logout_url``)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.cache import never_cache
from mozilla_django_oidc.views import OIDCLogoutView

from web.auth.oidc import provider_setting
from web.auth.session import session_actor


@never_cache
@login_required
def session_page(request: HttpRequest) -> HttpResponse:
    actor = session_actor(request)
    roles = sorted(actor.roles.items()) if actor else []
    context = {"actor": actor, "roles": roles}
    return render(request, "web/auth/session.html", context)


def failed(request: HttpRequest) -> HttpResponse:
    return render(request, "web/auth/failed.html", status=401)


def signed_out(request: HttpRequest) -> HttpResponse:
    return render(request, "web/auth/signed_out.html")


class ConsoleLogoutView(OIDCLogoutView):  # type: ignore[misc]
    """Ends the console session and sends the browser to the provider's end-session
    endpoint. Only POST: a link on another site cannot sign a person out."""

    http_method_names = ["post"]
    get_settings = staticmethod(provider_setting)
