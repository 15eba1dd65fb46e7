from __future__ import annotations

from typing import Any

from rest_framework import serializers

from controlplane.regions.models import Region
from controlplane.tenants.models import Tenant


class TenantSerializer(serializers.ModelSerializer[Tenant]):
    home_region: serializers.SlugRelatedField[Region] = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True
    )
    regions: serializers.SlugRelatedField[Region] = serializers.SlugRelatedField(
        slug_field="name",
        read_only=True,
        many=True,
        help_text="the regions the tenant may use besides its home region (mirror links)",
    )

    class Meta:
        model = Tenant
        fields = [
            "slug",
            "name",
            "home_region",
            "regions",
            "status",
            "status_reason",
            "identity_ref",
            "created_at",
            "updated_at",
        ]
        read_only_fields = fields


class TenantCreateSerializer(serializers.Serializer[Any]):
    slug = serializers.CharField(max_length=32, help_text="lowercase, prefixes topic names")
    name = serializers.CharField(max_length=200)
    home_region = serializers.SlugRelatedField(
        slug_field="name", queryset=Region.objects.all(), required=False, allow_null=True
    )
    regions = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Region.objects.all(),
        many=True,
        required=False,
        help_text="region names the tenant may use besides its home region (replaces them)",
    )


class TenantUpdateSerializer(serializers.Serializer[Any]):
    name = serializers.CharField(max_length=200, required=False)
    home_region = serializers.SlugRelatedField(
        slug_field="name", queryset=Region.objects.all(), required=False, allow_null=True
    )
    regions = serializers.SlugRelatedField(
        slug_field="name",
        queryset=Region.objects.all(),
        many=True,
        required=False,
        help_text="region names the tenant may use besides its home region (replaces them)",
    )
