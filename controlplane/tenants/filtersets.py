from __future__ import annotations

import django_filters

from controlplane.core.choices import ProvisioningStatus
from controlplane.core.filtersets import FilterSet
from controlplane.tenants.models import Tenant


class TenantFilterSet(FilterSet):
    status = django_filters.ChoiceFilter(choices=ProvisioningStatus.choices)
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    home_region = django_filters.CharFilter(field_name="home_region__name")

    class Meta:
        model = Tenant
        fields = ["status", "name", "home_region"]
