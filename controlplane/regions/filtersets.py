from __future__ import annotations

import django_filters

from controlplane.core.choices import ProvisioningStatus
from controlplane.core.filtersets import FilterSet
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.models import Broker, Cluster, Region


class RegionFilterSet(FilterSet):
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")

    class Meta:
        model = Region
        fields = ["name"]


class ClusterFilterSet(FilterSet):
    region = django_filters.CharFilter(field_name="region__name", help_text="region name")
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    provisioner = django_filters.ChoiceFilter(choices=ProvisionerKind.choices)
    status = django_filters.ChoiceFilter(choices=ProvisioningStatus.choices)

    class Meta:
        model = Cluster
        fields = ["region", "name", "provisioner", "status"]


class BrokerFilterSet(FilterSet):
    region = django_filters.CharFilter(field_name="cluster__region__name", help_text="region name")
    cluster = django_filters.NumberFilter(field_name="cluster_id", help_text="cluster id")
    phase = django_filters.ChoiceFilter(choices=BrokerPhase.choices)

    class Meta:
        model = Broker
        fields = ["region", "cluster", "phase"]
