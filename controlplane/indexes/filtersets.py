from __future__ import annotations

import django_filters

from controlplane.core.filtersets import FilterSet
from controlplane.indexes.models import Index


class IndexFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    topic = django_filters.CharFilter(field_name="topic__full_name", help_text="topic full name")

    class Meta:
        model = Index
        fields = ["tenant", "name", "topic"]
