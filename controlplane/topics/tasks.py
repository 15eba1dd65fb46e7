"""Celery jobs of the topics app: thin wrappers over ``controlplane.topics.reconcile``.

Retries: only ``BrokerUnavailable`` (a broker did not answer) and ``TopicBusy`` (another
run of the topic holds its lock) are retried, with exponential backoff and jitter; any
other error is a bug or a permanent refusal the service has already written onto the
topic. ``acks_late`` (the settings' default too):
a worker that dies mid-job leaves the message to be redelivered, which is safe because
every job is idempotent.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TypedDict

from celery import shared_task

from controlplane.gateway.errors import BrokerUnavailable
from controlplane.regions.models import Cluster
from controlplane.topics import reconcile, tiering
from controlplane.topics.drift import RETRY_BACKOFF_MAX_S
from controlplane.topics.locks import TopicBusy
from dataplane.tiered.store import RemoteStoreError

log = logging.getLogger(__name__)


class RetryOptions(TypedDict):
    autoretry_for: Sequence[type[BaseException]]
    retry_backoff: int
    retry_backoff_max: int
    retry_jitter: bool
    max_retries: int
    acks_late: bool


RETRY: RetryOptions = {
    "autoretry_for": (BrokerUnavailable, TopicBusy),
    "retry_backoff": 1,  # 1, 2, 4 ... s, each drawn in [0, that] by the jitter
    "retry_backoff_max": RETRY_BACKOFF_MAX_S,
    "retry_jitter": True,
    "max_retries": 12,
    "acks_late": True,
}


@shared_task(name="topics.reconcile_topic", **RETRY)
def reconcile_topic(topic_id: int) -> str:
    """Make one topic true on its brokers (or delete it); returns the ``Outcome``."""
    return str(reconcile.reconcile_topic(topic_id))


@shared_task(name="topics.reconcile_cluster", acks_late=True)
def reconcile_cluster(cluster_id: int) -> dict[str, object]:
    """One drift pass over a cluster; re-enqueues topics whose change has been waiting
    longer than a reconcile interval. Returns a summary."""
    report = reconcile.reconcile_cluster(cluster_id)
    for topic_id in report.stale_topic_ids:
        reconcile_topic.delay(topic_id)
    if report.findings or report.unreachable:
        log.info(
            "cluster %s: %d findings, unreachable %s",
            cluster_id,
            len(report.findings),
            report.unreachable,
        )
    return {
        "brokers_checked": report.brokers_checked,
        "unreachable": report.unreachable,
        "findings": len(report.findings),
        "resolved": report.resolved,
        "requeued_topics": report.stale_topic_ids,
    }


@shared_task(name="topics.reconcile_all", acks_late=True)
def reconcile_all() -> int:
    """Enqueue a drift pass for every cluster; returns how many."""
    cluster_ids = list(Cluster.objects.order_by("pk").values_list("pk", flat=True))
    for cluster_id in cluster_ids:
        reconcile_cluster.delay(cluster_id)
    return len(cluster_ids)


@shared_task(name="topics.clean_remote_stores", acks_late=True)
def clean_remote_stores() -> dict[str, int]:
    """Delete stray incarnations from every cluster's object store (``topics.tiering``);
    a store that does not answer is left to the next run. Returns per cluster id how
    many incarnations went."""
    cleaned: dict[str, int] = {}
    clusters = Cluster.objects.exclude(remote_store_uri="").order_by("pk")
    for cluster_id in clusters.values_list("pk", flat=True):
        try:
            cleaned[str(cluster_id)] = len(tiering.clean_remote_store(cluster_id))
        except RemoteStoreError as exc:
            log.warning("cluster %s: its store was not cleaned: %s", cluster_id, exc)
    return cleaned
