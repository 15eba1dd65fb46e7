from __future__ import annotations

from typing import Any

from rest_framework.permissions import SAFE_METHODS, BasePermission
from rest_framework.request import Request

from controlplane.core.actors import Actor


class IsAuthenticatedActor(BasePermission):
    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Actor)


class IsPlatformAdmin(BasePermission):
    message = "only platform administrators may do this"

    def has_permission(self, request: Request, view: Any) -> bool:
        return isinstance(request.user, Actor) and request.user.platform_admin


class PlatformAdminOrReadOnly(BasePermission):
    """Reads for any authenticated caller (the queryset decides what it sees); writes
    for platform administrators."""

    message = "only platform administrators may change this"

    def has_permission(self, request: Request, view: Any) -> bool:
        if not isinstance(request.user, Actor):
            return False
        return request.method in SAFE_METHODS or request.user.platform_admin
