"""Every error the API returns has one JSON shape:
``{"error": {"code": "...", "message": "...", "details": {...}}}``.
This is the one table from exceptions to HTTP statuses.

``exception_handler`` answers what a view raises (DRF calls it); the ``*_view``
functions answer what Django refuses before or around any view (``handler400/403/404/500``
in ``controlplane.urls``, ``CSRF_FAILURE_VIEW``): a disallowed ``Host``, a body over
``DATA_UPLOAD_MAX_MEMORY_SIZE`` read by a middleware, an unknown URL, a bug."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import (
    DisallowedHost,
    RequestDataTooBig,
    SuspiciousOperation,
    TooManyFieldsSent,
    TooManyFilesSent,
)
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404, HttpRequest, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_exception_handler

from controlplane.core import errors

STATUS_BY_ERROR: list[tuple[type[errors.DomainError], int]] = [
    (errors.InvalidRequest, status.HTTP_400_BAD_REQUEST),
    (errors.NotFound, status.HTTP_404_NOT_FOUND),
    (errors.PermissionDenied, status.HTTP_403_FORBIDDEN),
    (errors.QuotaExceeded, status.HTTP_409_CONFLICT),
    (errors.Conflict, status.HTTP_409_CONFLICT),
    (errors.Unavailable, status.HTTP_503_SERVICE_UNAVAILABLE),
    (errors.Unimplemented, status.HTTP_501_NOT_IMPLEMENTED),
]


# Django's refusals of a request body: each is the caller's 413, wherever it is raised.
_BODY_LIMITS = (RequestDataTooBig, TooManyFieldsSent, TooManyFilesSent)

_DRF_CODES = {
    exceptions.ValidationError: "invalid",
    exceptions.ParseError: "malformed",
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
}


def error_body(code: str, message: str, details: Any = None) -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "details": details or {}}}


def exception_handler(exc: Exception, context: dict[str, Any]) -> Response | None:
    if isinstance(exc, errors.DomainError):
        for cls, http_status in STATUS_BY_ERROR:
            if isinstance(exc, cls):
                body = error_body(exc.code, exc.message, exc.details)
                return Response(body, status=http_status)
    if isinstance(exc, DjangoValidationError):
        details = exc.message_dict if hasattr(exc, "error_dict") else {"": exc.messages}
        exc = exceptions.ValidationError(details)
    if isinstance(exc, DataError):
        # Input no validator caught that the database cannot take (a NUL byte in a
        # lookup or filter, a number out of the column's range): the caller's error.
        exc = exceptions.ValidationError(
            {"": ["a value the database cannot store (a NUL byte, a number out of range)"]}
        )
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    if isinstance(exc, SuspiciousOperation):
        # Raised when a view first reads the body or the host (Django checks its limits
        # lazily), so inside DRF: the same answers as Django's own handler400 below.
        return _suspicious_response(exc)
    response = drf_exception_handler(exc, context)
    if response is None:
        return None  # a bug: Django's 500 handler logs it
    assert isinstance(exc, exceptions.APIException)
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    if isinstance(exc, exceptions.ValidationError):
        message = "the request is invalid: " + _first_message(exc.detail)
        response.data = error_body(code, message, exc.detail)
    else:
        response.data = error_body(code, str(exc.detail))
    return response


def _first_message(detail: Any) -> str:
    if isinstance(detail, dict):
        for key, value in detail.items():
            inner = _first_message(value)
            return f"{key}: {inner}" if key not in ("non_field_errors", "") else inner
    if isinstance(detail, list) and detail:
        return _first_message(detail[0])
    return str(detail)


def _suspicious_response(exc: SuspiciousOperation) -> Response:
    status_code, body = _suspicious_error(exc)
    return Response(body, status=status_code)


def _suspicious_error(exc: Exception | None) -> tuple[int, dict[str, Any]]:
    """The status and body for a request Django refused as malformed or over a limit.
    Django's own message is not echoed: it can name settings (``ALLOWED_HOSTS``)."""
    if isinstance(exc, _BODY_LIMITS):
        limits = (
            f"{settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes, "
            f"{settings.DATA_UPLOAD_MAX_NUMBER_FIELDS} fields, "
            f"{settings.DATA_UPLOAD_MAX_NUMBER_FILES} files"
        )
        message = f"the request body is over this server's limits ({limits})"
        return 413, error_body("too_large", message)
    if isinstance(exc, DisallowedHost):
        return 400, error_body("bad_request", "the Host header names no host this server serves")
    return 400, error_body("bad_request", "the request is malformed")


def bad_request_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Django's 400 (``handler400``): a request refused before any view answered it."""
    status_code, body = _suspicious_error(exception)
    return JsonResponse(body, status=status_code)


def permission_denied_view(
    request: HttpRequest, exception: Exception | None = None
) -> JsonResponse:
    """Django's 403 (``handler403``): ``PermissionDenied`` raised outside DRF."""
    return JsonResponse(error_body("permission_denied", "permission denied"), status=403)


def csrf_failure_view(request: HttpRequest, reason: str = "") -> JsonResponse:
    """Django's CSRF refusal (``CSRF_FAILURE_VIEW``). The API authenticates with bearer
    tokens, which a browser never sends by itself, so its views are exempt; this answers
    any other view that checks."""
    message = f"CSRF verification failed: {reason}" if reason else "CSRF verification failed"
    return JsonResponse(error_body("permission_denied", message), status=403)


def not_found_view(request: HttpRequest, exception: Exception | None = None) -> JsonResponse:
    """Django's 404 (``handler404``) for a URL no route matches."""
    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}"), status=404)


def server_error_view(request: HttpRequest) -> JsonResponse:
    """Django's 500 (``handler500``); the error itself is logged."""
    return JsonResponse(error_body("server_error", "internal server error"), status=500)
