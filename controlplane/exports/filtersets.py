from __future__ import annotations

import django_filters

from controlplane.core.filtersets import FilterSet
from controlplane.exports.choices import ScheduleKind
from controlplane.exports.models import Export


class ExportFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    topic = django_filters.CharFilter(field_name="topic__full_name", help_text="topic full name")
    schedule_kind = django_filters.ChoiceFilter(choices=ScheduleKind.choices)

    class Meta:
        model = Export
        fields = ["tenant", "name", "topic", "schedule_kind", "enabled"]
