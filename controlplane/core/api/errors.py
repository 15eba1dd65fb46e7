"""Every error the API returns has one JSON shape:
``{"error": {"code": "...", "message": "...", "details": {...}}}``.
This is the one table from exceptions to HTTP statuses."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import DataError
from django.http import Http404
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
]

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


def not_found_view(request: Any, exception: Exception | None = None) -> Any:
    """Django's 404 for a URL no route matches, in the API's JSON error shape."""
    from django.http import JsonResponse

    return JsonResponse(error_body("not_found", f"no such endpoint: {request.path}"), status=404)


def server_error_view(request: Any) -> Any:
    """Django's 500, in the API's JSON error shape (the error itself is logged)."""
    from django.http import JsonResponse

    return JsonResponse(error_body("server_error", "internal server error"), status=500)
