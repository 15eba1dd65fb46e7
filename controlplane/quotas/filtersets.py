from __future__ import annotations

import django_filters

from controlplane.core.filtersets import FilterSet
from controlplane.quotas.models import Quota


class QuotaFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")

    class Meta:
        model = Quota
        fields = ["tenant"]
