"""Members, service accounts, and the local issuer's endpoints. Views are declarations:
tenant isolation comes from ``TenantScopedViewSet``, the work from ``accounts.services``."""

from __future__ import annotations

import base64
import binascii
from typing import Any
from urllib.parse import unquote

from django.conf import settings
from django.http.response import HttpResponseBase
from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import mixins, status
from rest_framework.decorators import action
from rest_framework.parsers import FormParser
from rest_framework.permissions import AllowAny
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from controlplane.accounts import local_oidc, services
from controlplane.accounts.api.serializers import (
    JwksSerializer,
    MemberInviteSerializer,
    MemberSerializer,
    MemberUpdateSerializer,
    ServiceAccountCreateSerializer,
    ServiceAccountSerializer,
    ServiceAccountUpdateSerializer,
    ServiceAccountWithSecretSerializer,
    TokenRequestSerializer,
    TokenSerializer,
    WhoAmISerializer,
)
from controlplane.accounts.filtersets import MemberFilterSet, ServiceAccountFilterSet
from controlplane.accounts.identity import InvalidToken, LocalIdentity, get_identity
from controlplane.accounts.keycloak import realm_url
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.api.errors import error_body
from controlplane.core.api.parsers import JSONParser
from controlplane.core.api.schema import ErrorSerializer
from controlplane.core.api.views import ServiceUpdateMixin
from controlplane.core.choices import Role
from controlplane.core.errors import NotFound
from controlplane.tenants.api.scoped import TenantScopedViewSet
from controlplane.tenants.models import Membership


class MemberViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceUpdateMixin[Membership],
    TenantScopedViewSet[Membership],
):
    """People and their role in a tenant. Inviting creates the person in the identity
    provider if needed; removing takes the role away."""

    queryset = Membership.objects.select_related("tenant")
    serializer_class = MemberSerializer
    input_serializer_classes = {
        "create": MemberInviteSerializer,
        "partial_update": MemberUpdateSerializer,
    }
    filterset_class = MemberFilterSet
    ordering_fields = ["username", "role", "created_at"]
    write_role = Role.TENANT_ADMIN

    @extend_schema(request=MemberInviteSerializer, responses={201: MemberSerializer})
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = self.validated_input()
        tenant = self.tenant_for_write(data.pop("tenant", None))
        membership = services.invite_member(tenant, actor=self.actor, **data)
        return self.respond(membership, status.HTTP_201_CREATED)

    def update_object(self, membership: Membership, data: dict[str, Any]) -> Membership:
        if "role" not in data:  # PATCH with nothing to change
            return membership
        return services.change_member_role(membership, actor=self.actor, role=data["role"])

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.remove_member(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ServiceAccountViewSet(
    mixins.ListModelMixin,
    mixins.RetrieveModelMixin,
    ServiceUpdateMixin[ServiceAccount],
    TenantScopedViewSet[ServiceAccount],
):
    """A tenant's machine identities (OAuth client-credentials clients). The secret is
    in the answers to create and rotate-secret only."""

    queryset = ServiceAccount.objects.select_related("tenant", "managed_by_link")
    serializer_class = ServiceAccountSerializer
    input_serializer_classes = {
        "create": ServiceAccountCreateSerializer,
        "partial_update": ServiceAccountUpdateSerializer,
    }
    filterset_class = ServiceAccountFilterSet
    ordering_fields = ["name", "role", "status", "created_at"]
    write_role = Role.TENANT_ADMIN

    @extend_schema(
        request=ServiceAccountCreateSerializer,
        responses={201: ServiceAccountWithSecretSerializer},
    )
    def create(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        data = self.validated_input()
        tenant = self.tenant_for_write(data.pop("tenant", None))
        account, secret = services.create_service_account(tenant, actor=self.actor, **data)
        return self._with_secret(account, secret, status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={200: ServiceAccountWithSecretSerializer})
    @action(detail=True, methods=["post"], url_path="rotate-secret")
    def rotate_secret(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        """A new secret; the old one stops working at once."""
        account = self.get_object()
        secret = services.rotate_service_account_secret(account, actor=self.actor)
        account.refresh_from_db()
        return self._with_secret(account, secret, status.HTTP_200_OK)

    def update_object(self, account: ServiceAccount, data: dict[str, Any]) -> ServiceAccount:
        return services.update_service_account(account, actor=self.actor, **data)

    @extend_schema(responses={204: None})
    def destroy(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        services.delete_service_account(self.get_object(), actor=self.actor)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def _with_secret(self, account: ServiceAccount, secret: str, code: int) -> Response:
        context = {**self.get_serializer_context(), "client_secret": secret}
        return Response(ServiceAccountWithSecretSerializer(account, context=context).data, code)


def _local_issuer(what: str, keycloak_path: str) -> LocalIdentity:
    """The local issuer, or a 404 pointing at Keycloak's ``keycloak_path`` instead."""
    identity = get_identity()
    if not isinstance(identity, LocalIdentity):
        url = f"{realm_url()}/{keycloak_path}"
        raise NotFound(f"the {what} is Keycloak's: {url}", url=url)
    return identity


class TokenView(APIView):
    """The local issuer's OAuth 2.0 token endpoint, enabled only when
    ``IDENTITY_PROVIDER`` is ``local`` (with Keycloak, a 404 naming Keycloak's): the
    client-credentials grant of service accounts here, the authorization-code (PKCE)
    and refresh-token grants of people in ``accounts.local_oidc``."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]
    parser_classes = [FormParser, JSONParser]

    @extend_schema(
        request=TokenRequestSerializer,
        responses={
            200: TokenSerializer,
            400: OpenApiResponse(ErrorSerializer, description="unsupported grant"),
            401: OpenApiResponse(ErrorSerializer, description="invalid client"),
            404: OpenApiResponse(ErrorSerializer, description="identity is Keycloak's"),
        },
        auth=[],
    )
    def post(self, request: Request) -> HttpResponseBase:
        identity = _local_issuer("token endpoint", "protocol/openid-connect/token")
        data = request.data if isinstance(request.data, dict) else {}
        if data.get("grant_type") in local_oidc.CODE_GRANTS:
            # People's grants (the console's sign-in): Authlib's server answers them.
            return local_oidc.token_response(request._request)
        body = TokenRequestSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        if body.validated_data["grant_type"] != "client_credentials":
            message = "only grant_type=client_credentials is supported"
            return Response(error_body("unsupported_grant_type", message), status=400)
        client_id, secret = _client_credentials(request, body.validated_data)
        try:
            token, expires_in = identity.token_for_client(client_id, secret)
        except InvalidToken as exc:
            response = Response(error_body("invalid_client", str(exc)), status=401)
            response["WWW-Authenticate"] = 'Basic realm="meridian"'
            return response
        data = {"access_token": token, "token_type": "Bearer", "expires_in": expires_in}
        return Response(data, headers={"Cache-Control": "no-store"})


def _client_credentials(request: Request, data: dict[str, Any]) -> tuple[str, str]:
    """From HTTP Basic (RFC 6749 §2.3.1, form-encoded parts) or the body."""
    scheme, _, encoded = request.META.get("HTTP_AUTHORIZATION", "").partition(" ")
    if scheme.lower() == "basic" and encoded:
        try:
            client_id, _, secret = base64.b64decode(encoded).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return "", ""
        return unquote(client_id), unquote(secret)
    return str(data.get("client_id", "")), str(data.get("client_secret", ""))


class JwksView(APIView):
    """The local issuer's public keys (what verifiers of its tokens fetch and cache)."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        responses={
            200: JwksSerializer,
            404: OpenApiResponse(ErrorSerializer, description="identity is Keycloak's"),
        },
        auth=[],
        operation_id="auth_jwks_retrieve",
    )
    def get(self, request: Request) -> Response:
        identity = _local_issuer("JWKS", "protocol/openid-connect/certs")
        max_age = min(int(settings.JWKS_CACHE_S), 300)
        return Response(identity.jwks(), headers={"Cache-Control": f"max-age={max_age}"})


class WhoAmIView(APIView):
    """The caller as the API sees it: subject, name, kind and role in each tenant."""

    @extend_schema(responses={200: WhoAmISerializer})
    def get(self, request: Request) -> Response:
        actor = request.user
        assert isinstance(actor, Actor)
        data = {
            "subject": actor.subject,
            "name": actor.name,
            "kind": actor.kind,
            "platform_admin": actor.platform_admin,
            "tenants": [{"slug": s, "role": actor.roles[s]} for s in actor.tenant_slugs],
        }
        return Response(WhoAmISerializer(data).data)
