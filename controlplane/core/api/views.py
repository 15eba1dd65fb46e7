"""Base viewsets. Tenant isolation is added once, by ``TenantScopedViewSet`` in
``controlplane.tenants.api.scoped``: every queryset is restricted to the caller's tenants,
so another tenant's object is a 404; a role too weak for the action on a visible object
is a 403.

Writes are declarations too: the ``Service*Mixin`` classes validate the request body with
``input_serializer_classes[action]``, hand the validated data to the viewset's
``create_object`` / ``update_object`` / ``delete_object`` (which call a service) and answer
with ``serializer_class`` of the result: 201 on create, 200 on update, and 202 on delete,
because deleting finishes after the response (the object shows status ``deleting``)."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model
from rest_framework import serializers, status, viewsets
from rest_framework.request import Request
from rest_framework.response import Response

from controlplane.core.actors import Actor
from controlplane.core.errors import NotFound

M = TypeVar("M", bound=Model)


class ServiceViewSet(viewsets.GenericViewSet[M]):
    """A viewset of model ``M`` whose writes call services with the acting ``Actor``."""

    input_serializer_classes: dict[str, type[serializers.BaseSerializer[Any]]] = {}

    @property
    def actor(self) -> Actor:
        user = self.request.user
        assert isinstance(user, Actor)
        return user

    def get_object(self) -> M:
        """The object named by the URL, or a 404. A NUL byte names nothing (the database
        refuses it in a query), so it is a 404 before the query is made."""
        lookup = self.kwargs.get(self.lookup_url_kwarg or self.lookup_field, "")
        if "\x00" in str(lookup):
            raise NotFound("not found")
        return super().get_object()

    def validated_input(self, partial: bool = False) -> dict[str, Any]:
        serializer = self.input_serializer_classes[self.action](
            data=self.request.data, partial=partial, context=self.get_serializer_context()
        )
        serializer.is_valid(raise_exception=True)
        return dict(serializer.validated_data)

    def respond(self, obj: M, code: int = status.HTTP_200_OK) -> Response:
        return Response(self.get_serializer(obj).data, status=code)


class ServiceCreateMixin(ServiceViewSet[M]):
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.create_object(self.validated_input())
        return self.respond(obj, status.HTTP_201_CREATED)

    def create_object(self, data: dict[str, Any]) -> M:
        raise NotImplementedError


class ServiceUpdateMixin(ServiceViewSet[M]):
    """PATCH only: every field is optional and only the given ones change."""

    def partial_update(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.get_object()
        obj = self.update_object(obj, self.validated_input(partial=True))
        return self.respond(obj)

    def update_object(self, obj: M, data: dict[str, Any]) -> M:
        raise NotImplementedError


class ServiceDestroyMixin(ServiceViewSet[M]):
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        obj = self.delete_object(self.get_object())
        return self.respond(obj, status.HTTP_202_ACCEPTED)

    def delete_object(self, obj: M) -> M:
        raise NotImplementedError
