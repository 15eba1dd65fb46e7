from __future__ import annotations

import django_filters

from controlplane.core.filtersets import FilterSet
from controlplane.lanes.choices import OrphanPolicy
from controlplane.lanes.models import Lane


class LaneFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    orphan_policy = django_filters.ChoiceFilter(choices=OrphanPolicy.choices)

    class Meta:
        model = Lane
        fields = ["tenant", "name", "orphan_policy"]
