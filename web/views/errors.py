"""The console's answer outside its views to a form refused for its CSRF token."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from controlplane.core.api.errors import csrf_failure_view
from web.middleware import CONSOLE_PREFIX


def csrf_failure(request: HttpRequest, reason: str = "") -> HttpResponse:
    """``CSRF_FAILURE_VIEW``: a console form without a valid CSRF token gets the
    console's 403 page; anything else the API's JSON answer."""
    if not request.path.startswith(CONSOLE_PREFIX):
        return csrf_failure_view(request, reason)
    why = "This form expired or was not sent from the console. Reload the page and try again."
    return render(request, "web/403.html", {"reason": why}, status=403)
