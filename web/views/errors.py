"""The console's answers outside its views: an unknown console URL, a refused form."""

from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.core.api.errors import csrf_failure_view
from web.middleware import CONSOLE_PREFIX


def not_found(request: HttpRequest) -> HttpResponse:
    raise Http404("no such page")  # the console's 404 page (web.middleware)


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: a console form without a valid CSRF token gets the
    console's 403 page; anything else the API's JSON answer."""
    if not request.path.startswith(CONSOLE_PREFIX):
        return csrf_failure_view(request, reason)
    why = "This form expired or was not sent from the console. Reload the page and try again."
    return render(request, "web/403.html", {"reason": why}, status=403)
