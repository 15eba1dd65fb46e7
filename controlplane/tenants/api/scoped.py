"""The base viewsets of tenant-owned resources: isolation at the queryset, once
(``TenantScopedViewSet``), or by the name's prefix for what the brokers keep
(``TenantNamedViewSet``)."""

from __future__ import annotations

from typing import Any, TypeVar

from django.db.models import Model, QuerySet
from rest_framework import viewsets
from rest_framework.permissions import SAFE_METHODS
from rest_framework.request import Request

from controlplane.core.actors import Actor
from controlplane.core.api.views import ServiceViewSet
from controlplane.core.choices import Role
from controlplane.core.errors import InvalidRequest, NotFound, PermissionDenied
from controlplane.core.validators import tenant_of_name
from controlplane.tenants.models import Tenant

M = TypeVar("M", bound=Model)


class TenantScopedViewSet(ServiceViewSet[M]):
    """For objects that belong to a tenant. ``tenant_path`` is the ORM path from the
    model to ``Tenant``; ``read_role`` and ``write_role`` are the weakest roles allowed
    to read and to change."""

    tenant_path = "tenant"
    read_role: str = Role.VIEWER
    write_role: str = Role.DEVELOPER

    def get_queryset(self) -> QuerySet[M]:
        queryset = super().get_queryset()
        if self.actor.platform_admin:
            return queryset
        return queryset.filter(**{f"{self.tenant_path}__slug__in": self.actor.tenant_slugs})

    def needed_role(self) -> str:
        return self.read_role if self.request.method in SAFE_METHODS else self.write_role

    def check_object_permissions(self, request: Request, obj: M) -> None:
        super().check_object_permissions(request, obj)
        slug = self.tenant_of(obj).slug
        if not self.actor.can(slug, self.needed_role()):
            raise PermissionDenied(
                f"your role in tenant {slug!r} does not allow this",
                needed_role=self.needed_role(),
                role=self.actor.role_in(slug),
            )

    def tenant_of(self, obj: Any) -> Any:
        for part in self.tenant_path.split("__"):
            obj = getattr(obj, part)
        return obj

    def tenant_for_write(self, slug: str | None) -> Any:
        """The tenant a new object goes to: the named one, or the caller's only tenant.
        A tenant the caller has no role in does not exist for it (404)."""
        actor = self.actor
        if not slug:
            if len(actor.tenant_slugs) != 1:
                raise NotFound("name the tenant: field 'tenant' is required", field="tenant")
            slug = actor.tenant_slugs[0]
        if not actor.platform_admin and actor.role_in(slug) is None:
            raise NotFound(f"tenant {slug!r} not found")
        tenant = Tenant.objects.filter(slug=slug).first()
        if tenant is None:
            raise NotFound(f"tenant {slug!r} not found")
        if not actor.can(slug, self.write_role):
            raise PermissionDenied(
                f"your role in tenant {slug!r} does not allow this",
                needed_role=self.write_role,
                role=actor.role_in(slug),
            )
        return tenant


def named_tenant(request: Request) -> str | None:
    """The tenant slug a write's body names (None: the caller's only tenant), read
    before the body is validated, so a caller learns nothing of a tenant it has no role
    in, not even what its body lacks; a value of another type is the serializer's to
    refuse."""
    slug = request.data.get("tenant") if isinstance(request.data, dict) else None
    return slug if isinstance(slug, str) else None


class NamedInTenant:
    """``get_object`` for a name unique per tenant only: among the caller's objects
    (after ``?tenant=``); a 404 if none, a 400 if several tenants have one."""

    noun = "an object"

    def get_object(self) -> Any:
        view: Any = self
        lookup = view.kwargs.get(view.lookup_field, "")
        if "\x00" not in str(lookup):
            matches = view.filter_queryset(view.get_queryset()).filter(
                **{view.lookup_field: lookup}
            )
            if matches[:2].count() > 1:
                raise InvalidRequest(
                    f"several of your tenants have {self.noun} {lookup!r}: name the tenant "
                    "(?tenant=)",
                    tenant=["name the tenant"],
                )
        return super().get_object()  # type: ignore[misc]


class TenantNamedViewSet(viewsets.ViewSet):
    """For objects the brokers keep and name ``<tenant>.<name>`` (consumer groups,
    transactional ids): a name's tenant is its prefix, and a caller without a role there
    sees nothing of it (404, as for a missing one); a role too weak is a 403."""

    read_role: str = Role.VIEWER
    write_role: str = Role.DEVELOPER
    kind = "object"  # in messages: "group 'acme.x' not found"
    name_field = "name"  # the 404's detail naming it

    @property
    def actor(self) -> Actor:
        user = self.request.user
        assert isinstance(user, Actor)
        return user

    def named_tenant(self, name: str, needed: str) -> Tenant:
        """The tenant ``name`` names, if the caller may see it (else 404) and holds
        ``needed`` there (else 403)."""
        slug = tenant_of_name(name)
        actor = self.actor
        visible = slug is not None and (actor.platform_admin or actor.role_in(slug) is not None)
        tenant = Tenant.objects.filter(slug=slug).first() if visible else None
        if tenant is None:
            raise NotFound(f"{self.kind} {name!r} not found", **{self.name_field: name})
        if not actor.can(tenant.slug, needed):
            raise PermissionDenied(
                f"your role in tenant {tenant.slug!r} does not allow this",
                needed_role=needed,
                role=actor.role_in(tenant.slug),
            )
        return tenant

    def listed_tenants(self) -> list[Tenant]:
        """The caller's tenants (every one for a platform admin), or the one ``?tenant=``
        names among them."""
        wanted = self.request.query_params.get("tenant")
        actor = self.actor
        tenants = Tenant.objects.order_by("slug")
        if not actor.platform_admin:
            tenants = tenants.filter(slug__in=actor.tenant_slugs)
        return list(tenants.filter(slug=wanted) if wanted else tenants)
