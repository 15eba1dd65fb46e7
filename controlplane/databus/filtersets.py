from __future__ import annotations

import django_filters

from controlplane.core.filtersets import FilterSet
from controlplane.databus.models import DatabusAgent, DatabusConfig


class DatabusConfigFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")

    class Meta:
        model = DatabusConfig
        fields = ["tenant", "name"]


class DatabusAgentFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    config = django_filters.CharFilter(
        field_name="config_name", help_text="the configuration the agent runs, by name"
    )

    class Meta:
        model = DatabusAgent
        fields = ["tenant", "config"]
