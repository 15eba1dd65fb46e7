"""Who is looking at a console page, and in which tenant.

The caller is the ``Actor`` of the OIDC access token that sign-in keeps in the session
(``oidc_access_token``, mozilla-django-oidc's key), verified and bound to live tenants
exactly as the REST API does (``controlplane.accounts.authentication``): the console
grants nothing a bearer token of the same user would not. No token, or one no longer
valid (expired, forged, its tenants gone), sends the browser to sign-in with ``next``.

A tenant page (``/console/t/<tenant>/...``) needs a role in that tenant (platform
administrators have every tenant): a tenant the caller has no role in answers the same
404 as one that does not exist. Reads need ``viewer``, writes (POST) the role the view
names: ``developer`` for topics, ``tenant-admin`` for members; a role too weak is a 403.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus, Role
from controlplane.tenants.models import Tenant
from web.auth.session import session_actor

SIGN_IN_URL_NAME = "console-auth-login"
SIGN_OUT_URL_NAME = "console-auth-logout"

View = Callable[..., HttpResponse]


@dataclass(frozen=True)
class Console:
    """What a tenant page knows of its caller: the actor and the tenant of the URL."""

    actor: Actor
    tenant: Tenant

    @property
    def role(self) -> str | None:
        """The caller's role in the tenant (``None``: a platform administrator without
        one, who may still do everything)."""
        return self.actor.role_in(self.tenant.slug)

    def can(self, needed: str) -> bool:
        return self.actor.can(self.tenant.slug, needed)

    @property
    def can_write(self) -> bool:
        return self.can(Role.DEVELOPER)

    @property
    def can_manage(self) -> bool:
        return self.can(Role.TENANT_ADMIN)


def sign_in_redirect(request: HttpRequest) -> HttpResponse:
    """To sign-in, coming back to this page."""
    url = reverse(SIGN_IN_URL_NAME)
    return HttpResponseRedirect(f"{url}?{urlencode({'next': request.get_full_path()})}")


def visible_tenant(actor: Actor, slug: str) -> Tenant:
    """The live tenant ``slug`` if the actor has a role there (or is a platform
    administrator); else ``Http404``, the same whether it exists or not."""
    if not actor.platform_admin and actor.role_in(slug) is None:
        raise Http404("no such tenant")
    tenant = Tenant.objects.filter(slug=slug).exclude(status=ProvisioningStatus.DELETING).first()
    if tenant is None:
        raise Http404("no such tenant")
    return tenant


def signed_in(view: View) -> View:
    """Views for any signed-in caller: ``request.actor`` is set."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        actor = session_actor(request)
        if actor is None:
            return sign_in_redirect(request)
        request.actor = actor  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return wrapper


def tenant_page(
    *, read_role: str = Role.VIEWER, write_role: str = Role.DEVELOPER
) -> Callable[[View], View]:
    """Views of one tenant (URL keyword ``tenant``): ``request.console`` is set.
    GET and HEAD need ``read_role`` (a page that is only a form: its ``write_role``);
    any other method ``write_role``."""

    def decorate(view: View) -> View:
        @signed_in
        @functools.wraps(view)
        def wrapper(request: HttpRequest, tenant: str, **kwargs: Any) -> HttpResponse:
            console = Console(actor=request.actor, tenant=visible_tenant(request.actor, tenant))  # type: ignore[attr-defined]
            needed = read_role if request.method in ("GET", "HEAD") else write_role
            if not console.can(needed):
                raise PermissionDenied(f"your role in tenant {tenant!r} does not allow this")
            request.console = console  # type: ignore[attr-defined]
            return view(request, **kwargs)

        return wrapper

    return decorate


def platform_page(view: View) -> View:
    """Views of the platform administrator's pages (``/console/platform/...``): anyone
    else gets the 404 of a URL that matches nothing, byte for byte (``request.actor`` is
    left unset, so the layout shows what it shows there), so tenant users do not learn
    the pages exist. No session: sign-in, as any console page."""

    @functools.wraps(view)
    def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        actor = session_actor(request)
        if actor is None:
            return sign_in_redirect(request)
        if not actor.platform_admin:
            raise Http404("no such page")
        request.actor = actor  # type: ignore[attr-defined]
        return view(request, *args, **kwargs)

    return wrapper


def console_of(request: HttpRequest) -> Console:
    console = getattr(request, "console", None)
    assert isinstance(console, Console), "view not wrapped by tenant_page"
    return console
