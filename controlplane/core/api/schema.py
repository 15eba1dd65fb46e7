"""How the API describes itself (drf-spectacular): the bearer-token security scheme and
the error responses every operation can give, all with the one error body of
``core.api.errors``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiAuthenticationExtension
from drf_spectacular.openapi import AutoSchema as SpectacularAutoSchema
from rest_framework import serializers

from controlplane.core.api.views import ServiceViewSet


class ErrorDetailSerializer(serializers.Serializer[dict[str, Any]]):
    code = serializers.CharField(help_text="stable machine-readable code, e.g. quota_exceeded")
    message = serializers.CharField()
    details = serializers.JSONField(help_text="the offending fields or values")


class ErrorSerializer(serializers.Serializer[dict[str, Any]]):
    """``{"error": {"code", "message", "details"}}``"""

    error = ErrorDetailSerializer()


# What can go wrong, by kind of operation (every operation authenticates).
_ANY = ("400", "401", "403", "404")
_WRITE = ("409", "413", "503")  # 413: a body over DATA_UPLOAD_MAX_MEMORY_SIZE


# The success status of each write a ``ServiceViewSet`` declares.
_SERVICE_STATUS = {"create": "201", "partial_update": "200", "destroy": "202"}


class AutoSchema(SpectacularAutoSchema):
    """drf-spectacular's schema plus the documented error responses; a
    ``ServiceViewSet``'s writes read ``input_serializer_classes`` and answer
    ``serializer_class`` (``extend_schema`` still overrides both)."""

    def get_request_serializer(self) -> Any:
        inputs = getattr(self.view, "input_serializer_classes", {})
        action = getattr(self.view, "action", None)
        if action in inputs:
            return inputs[action]
        return super().get_request_serializer()

    def get_response_serializers(self) -> Any:
        action = getattr(self.view, "action", None)
        if isinstance(self.view, ServiceViewSet) and action in _SERVICE_STATUS:
            return {_SERVICE_STATUS[action]: self.view.get_serializer_class()}
        return super().get_response_serializers()

    def _get_response_bodies(self, direction: Any = "response") -> dict[str, Any]:
        responses: dict[str, Any] = super()._get_response_bodies(direction)
        codes = _ANY if self.method in ("GET", "HEAD") else _ANY + _WRITE
        for code in codes:
            if code not in responses:
                responses[code] = self._get_response_for_code(  # type: ignore[no-untyped-call]
                    ErrorSerializer, code, direction=direction
                )
        return responses


class BearerTokenScheme(OpenApiAuthenticationExtension):  # type: ignore[no-untyped-call]
    target_class = "controlplane.accounts.authentication.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema: Any) -> dict[str, str]:
        return {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
