"""Building indexes: the job's spec (files by ids under ``settings.INDEX_ROOT``), one
build at a time under the index's lock, and deleting a deleted index's files. The
Celery tasks call this module."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings

from controlplane.core.errors import Unavailable
from controlplane.exports import runs
from controlplane.exports.fields import spec_fields
from controlplane.indexes.models import Index, IndexBuild
from controlplane.topics.locks import object_lock
from dataplane.tiered.store import ObjectStore
from spark.jobs.spec import IndexSpec

# classid of the two-key advisory lock space ("MI": Meridian indexes).
LOCK_NAMESPACE = 0x4D49
INDEX_MODULE = "spark.jobs.index"


class IndexBusy(Unavailable):
    """Another build of the index holds its lock; the task retries later."""

    code = "index_busy"

    def __init__(self, index_id: int) -> None:
        super().__init__(f"index {index_id} is being built by another task", index_id=index_id)


def index_key(tenant_id: int, index_id: int) -> str:
    return f"{tenant_id}/{index_id}"


def index_target(index: Index) -> str:
    """``<INDEX_ROOT>/<tenant id>/<index id>``: by ids, so no name can reach another's."""
    return f"{index_root().rstrip('/')}/{index_key(index.tenant_id, index.pk)}"


def index_root() -> str:
    """``settings.INDEX_ROOT``, a relative folder made absolute (the jobs run elsewhere)."""
    root = str(settings.INDEX_ROOT)
    return root if "://" in root or root.startswith("/") else str(Path(root).resolve())


def delete_index_files(tenant_id: int, index_id: int) -> int:
    """Delete a deleted index's files; returns how many objects went."""
    store = ObjectStore.open(index_root(), dict(settings.INDEX_ROOT_OPTIONS))
    keys = [info.key for info in store.list(index_key(tenant_id, index_id))]
    if keys:
        store.delete(keys)
    return len(keys)


def index_spec(index: Index) -> IndexSpec:
    cluster = index.topic.cluster
    return IndexSpec(
        index_id=str(index.pk),
        topic=index.topic.full_name,
        store_uri=cluster.remote_store_uri,
        store_options=dict(cluster.remote_store_options),
        target_uri=index_target(index),
        target_options=dict(settings.INDEX_ROOT_OPTIONS),
        fields=spec_fields(index.fields),
        value_format=index.value_format,
        include_lanes=index.include_lanes,
    )


def build_index(index_id: int, build_id: int) -> IndexBuild | None:
    """Run the queued build ``build_id`` to its end (None: gone or finished already);
    ``IndexBusy`` while another task builds this index."""
    with object_lock(LOCK_NAMESPACE, index_id, lambda: IndexBusy(index_id)):
        index = Index.objects.select_related("tenant", "topic__cluster").filter(pk=index_id).first()
        if index is None:
            return None
        return runs.run_claimed(
            IndexBuild.objects.filter(index=index),
            build_id,
            index.topic,
            index.include_lanes,
            INDEX_MODULE,
            lambda: index_spec(index).to_json(),
        )
