"""The rules exports and indexes share: the topic is one of the tenant's trunk
topics, read from the object store, and one run at a time."""

from __future__ import annotations

import re

from controlplane.core.errors import Conflict, InvalidRequest
from controlplane.core.validators import SLUG_RE, slug_validator
from controlplane.tenants.models import Tenant
from controlplane.topics.choices import TopicStatus
from controlplane.topics.models import Topic


class TopicNotTiered(InvalidRequest):
    """Exports read the topic's sealed segments from the object store: it needs
    tiered storage (``remote_storage``)."""

    code = "topic_not_tiered"

    def __init__(self, topic: Topic) -> None:
        message = (
            f"topic {topic.full_name!r} has no remote_storage: exports read sealed segments "
            "from the object store (tiered storage), never from the brokers; turn "
            "remote_storage on for the topic first"
        )
        super().__init__(f"topic: {message}", topic=[message])


class ClusterWithoutStore(InvalidRequest):
    """The topic's cluster tiers to no object store, so there is nothing to read."""

    code = "cluster_without_store"

    def __init__(self, topic: Topic) -> None:
        message = (
            f"the cluster of topic {topic.full_name!r} has no object store: exports read "
            "sealed segments from it"
        )
        super().__init__(f"topic: {message}", topic=[message])


class RunInProgress(Conflict):
    """A run of the export (or build of the index) is already queued or running."""

    code = "run_in_progress"


def check_name(name: object) -> None:
    if not isinstance(name, str) or not re.match(SLUG_RE, name):
        rule = str(slug_validator.message)
        raise InvalidRequest(f"name: {rule}", name=[rule])


def resolve_topic(tenant: Tenant, topic: str | Topic) -> Topic:
    """One of ``tenant``'s trunk topics (by name: the origin), not being deleted
    (``InvalidRequest`` naming ``topic`` otherwise; another tenant's topic is answered
    as a missing one)."""
    live = (
        Topic.objects.origins()
        .filter(tenant=tenant, trunk__isnull=True)
        .exclude(status=TopicStatus.DELETING)
    )
    if isinstance(topic, Topic):
        found = live.filter(pk=topic.pk).select_related("cluster").first()
    else:
        name = str(topic)
        full = name if name.startswith(f"{tenant.slug}.") else f"{tenant.slug}.{name}"
        found = live.filter(full_name=full).select_related("cluster").first()
    if found is None:
        message = f"no topic {str(topic)!r} in tenant {tenant.slug!r}"
        raise InvalidRequest(f"topic: {message}", topic=[message])
    return found


def check_topic_readable(topic: Topic) -> None:
    """The jobs read the object store only: the topic tiers, and to a store."""
    if not topic.remote_storage:
        raise TopicNotTiered(topic)
    if not topic.cluster.remote_store_uri:
        raise ClusterWithoutStore(topic)
