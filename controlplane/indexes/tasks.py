"""Celery jobs of the indexes app: thin wrappers over ``controlplane.indexes.building``.

``indexes.build_index`` retries only ``IndexBusy``; a job's failure is the build's
outcome, recorded. ``indexes.delete_index_files`` retries while the store is
unreachable."""

from __future__ import annotations

from celery import shared_task

from controlplane.indexes import building
from controlplane.indexes.building import IndexBusy
from controlplane.topics.drift import RETRY_BACKOFF_MAX_S
from dataplane.tiered.store import RemoteStoreError


@shared_task(
    name="indexes.build_index",
    autoretry_for=(IndexBusy,),
    retry_backoff=5,
    retry_backoff_max=RETRY_BACKOFF_MAX_S,
    retry_jitter=True,
    max_retries=12,
    acks_late=True,
)
def build_index(index_id: int, build_id: int) -> str | None:
    """Run one queued build of an index; returns its final state (None: nothing to do)."""
    build = building.build_index(index_id, build_id)
    return None if build is None else str(build.state)


@shared_task(
    name="indexes.delete_index_files",
    autoretry_for=(RemoteStoreError,),
    retry_backoff=5,
    retry_backoff_max=RETRY_BACKOFF_MAX_S,
    max_retries=12,
    acks_late=True,
)
def delete_index_files(tenant_id: int, index_id: int) -> int:
    """Delete a deleted index's files; returns how many objects went."""
    return building.delete_index_files(tenant_id, index_id)
