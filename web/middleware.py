"""Headers and error pages of the console.

``ContentSecurityPolicyMiddleware`` sets one policy on every response: scripts and
styles only from the control plane itself (no inline script, no ``eval``), no plugins,
no framing. ``ConsoleErrorMiddleware`` answers a failing console view with the console's
own 404, 403 and 500 pages (the project's URL handlers answer in the API's JSON shape),
and so a URL under ``/console/`` that matches nothing: no stack trace, file path or
broker address reaches a tenant; the 500 is logged."""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import render

log = logging.getLogger(__name__)

CONTENT_SECURITY_POLICY = "; ".join(
    [
        "default-src 'self'",
        "script-src 'self'",
        "style-src 'self'",
        "img-src 'self' data:",
        "connect-src 'self'",
        "object-src 'none'",
        "base-uri 'none'",
        "frame-ancestors 'none'",
    ]
)
CONSOLE_PREFIX = "/console/"


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        return response


class ConsoleErrorMiddleware:
    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        response = self.get_response(request)
        if (
            response.status_code == 404
            and request.path.startswith(CONSOLE_PREFIX)
            and response.get("Content-Type", "").startswith("application/json")
        ):
            return render(request, "web/404.html", status=404)  # handler404's answer
        return response

    def process_exception(self, request: HttpRequest, exc: Exception) -> HttpResponse | None:
        if not request.path.startswith(CONSOLE_PREFIX):
            return None  # the API's own handlers answer
        if isinstance(exc, Http404):
            return render(request, "web/404.html", status=404)
        if isinstance(exc, PermissionDenied):
            return render(request, "web/403.html", {"reason": str(exc)}, status=403)
        log.error("console error at %s", request.path, exc_info=exc)
        return render(request, "web/500.html", status=500)
