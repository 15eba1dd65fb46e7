from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.accounts.models import ServiceAccount
from controlplane.core.choices import Role
from controlplane.tenants.models import Membership, Tenant

_TENANT_HELP = "tenant slug; may be left out by a caller with a role in one tenant only"


class MemberSerializer(serializers.ModelSerializer[Membership]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )

    class Meta:
        model = Membership
        fields = [
            "id",
            "tenant",
            "username",
            "email",
            "role",
            "subject",
            "status",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class MemberInviteSerializer(serializers.Serializer[Any]):
    tenant = serializers.CharField(max_length=32, required=False, help_text=_TENANT_HELP)
    username = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,254}$",
        max_length=255,
        help_text="the person's login name in the identity provider",
    )
    email = serializers.EmailField(required=False, default="")
    role = serializers.ChoiceField(choices=Role.choices)


class MemberUpdateSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Role.choices)


class ServiceAccountSerializer(serializers.ModelSerializer[ServiceAccount]):
    tenant: serializers.SlugRelatedField[Tenant] = serializers.SlugRelatedField(
        slug_field="slug", read_only=True
    )
    managed_by_link = serializers.CharField(
        source="managed_by_link.name",
        read_only=True,
        allow_null=True,
        default=None,
        help_text="the mirror link whose workers use it (made, rotated and deleted with "
        "the link; 409 managed_account to the tenant), or null",
    )

    class Meta:
        model = ServiceAccount
        fields = [
            "id",
            "tenant",
            "name",
            "description",
            "role",
            "client_id",
            "managed_by_link",
            "status",
            "status_reason",
            "created_by",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class ServiceAccountWithSecretSerializer(ServiceAccountSerializer):
    """The account and its secret: only in the answers to create and rotate-secret."""

    client_secret = serializers.SerializerMethodField(
        help_text="shown once: store it now; rotate it if lost"
    )

    class Meta(ServiceAccountSerializer.Meta):
        fields = [*ServiceAccountSerializer.Meta.fields, "client_secret"]
        read_only_fields = fields

    def get_client_secret(self, obj: ServiceAccount) -> str:
        return str(self.context["client_secret"])


class ServiceAccountCreateSerializer(serializers.Serializer[Any]):
    tenant = serializers.CharField(max_length=32, required=False, help_text=_TENANT_HELP)
    name = serializers.CharField(max_length=32, help_text="client id becomes <tenant>--<name>")
    role = serializers.ChoiceField(choices=Role.choices, default=Role.DEVELOPER)
    description = serializers.CharField(max_length=500, required=False, default="")


class ServiceAccountUpdateSerializer(serializers.Serializer[Any]):
    role = serializers.ChoiceField(choices=Role.choices, required=False)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True)


class TokenRequestSerializer(serializers.Serializer[Any]):
    """OAuth 2.0 client-credentials request (RFC 6749 §4.4), as a form or JSON; the
    client may instead authenticate with HTTP Basic."""

    grant_type = serializers.CharField()
    client_id = serializers.CharField(required=False)
    client_secret = serializers.CharField(required=False)
    scope = serializers.CharField(required=False, help_text="ignored")


class TokenSerializer(serializers.Serializer[dict[str, Any]]):
    access_token = serializers.CharField()
    token_type = serializers.CharField()
    expires_in = serializers.IntegerField()


class JwksSerializer(serializers.Serializer[dict[str, Any]]):
    """A JWKS document (RFC 7517): the issuer's public RSA keys."""

    keys = serializers.ListField(child=serializers.DictField())


class TenantRoleSerializer(serializers.Serializer[dict[str, Any]]):
    slug = serializers.CharField()
    role = serializers.CharField()


class WhoAmISerializer(serializers.Serializer[dict[str, Any]]):
    subject = serializers.CharField()
    name = serializers.CharField()
    kind = serializers.ChoiceField(choices=["user", "service", "system"])
    platform_admin = serializers.BooleanField()
    tenants = TenantRoleSerializer(many=True)
