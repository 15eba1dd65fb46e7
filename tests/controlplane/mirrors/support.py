"""Shared rows for the mirrors tests: two regions (``east``, ``west``) with a ready
cluster each (broker rows only), a tenant at home in east that may use west, and its
topics."""

from __future__ import annotations

from typing import Any

from django.db.models import F

from controlplane.core.actors import Actor
from controlplane.mirrors import services
from controlplane.mirrors.models import MirrorLink
from controlplane.regions.models import Cluster, Region
from controlplane.tenants.models import Tenant
from controlplane.topics.models import Topic
from controlplane.topics.services import create_topic
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")


def two_regions() -> tuple[Cluster, Cluster]:
    return make_cluster("east", "c1"), make_cluster("west", "c1")


def region(name: str) -> Region:
    found: Region = Region.objects.get(name=name)
    return found


def mirror_tenant(slug: str = "acme") -> Tenant:
    """A tenant at home in east that may use west too."""
    tenant = make_tenant(slug, region=region("east"))
    tenant.regions.set([region("west")])
    return tenant


def topic(tenant: Tenant, name: str = "orders", partitions: int = 3, **config: Any) -> Topic:
    created: Topic = create_topic(
        tenant, name=name, partitions=partitions, region="east", actor=SYSTEM, **config
    )
    return created


def link(tenant: Tenant, name: str = "orders-west", **fields: Any) -> MirrorLink:
    fields.setdefault("source_region", "east")
    fields.setdefault("target_region", "west")
    if "topic_pattern" not in fields:
        fields.setdefault("topics", ["orders"])
    made: MirrorLink = services.create_link(tenant, name=name, actor=SYSTEM, **fields)
    return made


def copy_of(full_name: str, region_name: str = "west") -> Topic:
    found: Topic = Topic.objects.get(full_name=full_name, cluster__region__name=region_name)
    return found


def converge(*topics: Topic) -> None:
    """What the reconciler does once a topic is on its brokers."""
    Topic.objects.filter(pk__in=[t.pk for t in topics]).update(
        status="ready", observed_generation=F("generation")
    )
