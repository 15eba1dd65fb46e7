from __future__ import annotations

import django_filters

from controlplane.core.filtersets import FilterSet
from controlplane.topics.choices import DriftKind, TopicStatus
from controlplane.topics.models import DriftFinding, Topic, TopicAcl


class TopicFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="tenant__slug", help_text="tenant slug")
    status = django_filters.ChoiceFilter(choices=TopicStatus.choices)
    name = django_filters.CharFilter(lookup_expr="icontains", help_text="name contains")
    region = django_filters.CharFilter(
        field_name="cluster__region__name",
        help_text="region name: on a topic's own URL, picks the topic of that name there "
        "(a mirror copy); default: the origin",
    )
    mirror_copy = django_filters.BooleanFilter(
        field_name="mirror_of", lookup_expr="isnull", exclude=True, help_text="mirror copies only"
    )
    cluster = django_filters.CharFilter(field_name="cluster__name")
    remote_storage = django_filters.BooleanFilter(help_text="tiered storage on")

    class Meta:
        model = Topic
        fields = ["tenant", "status", "name", "region", "mirror_copy", "cluster", "remote_storage"]


class DriftFindingFilterSet(FilterSet):
    kind = django_filters.ChoiceFilter(choices=DriftKind.choices)
    healed = django_filters.BooleanFilter()
    open = django_filters.BooleanFilter(
        field_name="resolved_at", lookup_expr="isnull", help_text="not resolved yet"
    )
    topic = django_filters.CharFilter(field_name="topic_name", help_text="full topic name")
    broker = django_filters.NumberFilter(field_name="broker__broker_id")
    cluster = django_filters.CharFilter(field_name="broker__cluster__name")

    class Meta:
        model = DriftFinding
        fields = ["kind", "healed", "open", "topic", "broker", "cluster"]


class TopicAclFilterSet(FilterSet):
    tenant = django_filters.CharFilter(field_name="topic__tenant__slug", help_text="tenant slug")
    topic = django_filters.CharFilter(field_name="topic__full_name", help_text="full topic name")
    region = django_filters.CharFilter(
        field_name="topic__cluster__region__name", help_text="the topic's region"
    )
    principal = django_filters.CharFilter(help_text="client id or subject, exactly")

    class Meta:
        model = TopicAcl
        fields = ["tenant", "topic", "region", "principal"]
