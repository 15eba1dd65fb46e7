from __future__ import annotations

import django_filters

from controlplane.accounts.models import ServiceAccount
from controlplane.core.choices import ProvisioningStatus, Role
from controlplane.core.filtersets import FilterSet
from controlplane.tenants.models import Membership


class MemberFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    role = django_filters.ChoiceFilter(choices=Role.choices)
    username = django_filters.CharFilter(lookup_expr="icontains", help_text="username contains")

    class Meta:
        model = Membership
        fields = ["tenant", "role", "username"]


class ServiceAccountFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    role = django_filters.ChoiceFilter(choices=Role.choices)
    status = django_filters.ChoiceFilter(choices=ProvisioningStatus.choices)
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")

    class Meta:
        model = ServiceAccount
        fields = ["tenant", "role", "status", "name"]
