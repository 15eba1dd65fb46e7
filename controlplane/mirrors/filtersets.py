from __future__ import annotations

import django_filters
from django.db.models import Q, QuerySet

from controlplane.core.filtersets import FilterSet
from controlplane.mirrors.choices import Direction, MirrorHealth
from controlplane.mirrors.models import MirrorLink


class MirrorLinkFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    region = django_filters.CharFilter(
        method="in_region", help_text="region name: links with it as source or target"
    )
    source_region = django_filters.CharFilter(field_name="source_region__name")
    target_region = django_filters.CharFilter(field_name="target_region__name")
    direction = django_filters.ChoiceFilter(choices=Direction.choices)
    health = django_filters.ChoiceFilter(choices=MirrorHealth.choices)

    class Meta:
        model = MirrorLink
        fields = [
            "tenant", "name", "region", "source_region", "target_region", "direction",
            "health", "paused",
        ]  # fmt: skip

    def in_region(
        self, queryset: QuerySet[MirrorLink], name: str, value: str
    ) -> QuerySet[MirrorLink]:
        return queryset.filter(Q(source_region__name=value) | Q(target_region__name=value))
