"""A tiered topic's objects in its cluster's store: the periodic cleaner deletes the
incarnations no topic row owns and nothing else; a store that does not answer holds
nothing up."""

from __future__ import annotations

from pathlib import Path

import pytest

from controlplane.core.actors import Actor
from controlplane.regions.models import Cluster
from controlplane.topics import services, tasks, tiering
from controlplane.topics.models import Topic
from dataplane.tiered import layout
from dataplane.tiered.store import ObjectStore, RemoteStoreUnavailableError
from tests.controlplane.api_base import make_cluster
from tests.support.controlplane import make_tenant

SYSTEM = Actor.system("tests")


@pytest.fixture
def store(tmp_path: Path) -> ObjectStore:
    return ObjectStore.open(str(tmp_path / "objects"))


@pytest.fixture
def cluster(db: None, store: ObjectStore) -> Cluster:
    cluster = make_cluster("local")
    cluster.remote_store_uri = store.uri
    cluster.save()
    return cluster


@pytest.fixture
def topic(cluster: Cluster) -> Topic:
    tenant = make_tenant("acme")
    return services.create_topic(tenant, name="orders", partitions=1, remote_storage=True,
                                 actor=SYSTEM)  # fmt: skip


def _put(store: ObjectStore, topic: str, topic_id: str) -> str:
    key = f"{layout.partition_prefix(topic, topic_id, 0)}/segment"
    store.put_bytes(key, b"records")
    return key


def test_the_cleaner_deletes_only_incarnations_no_topic_owns(
    store: ObjectStore, cluster: Cluster, topic: Topic
) -> None:
    live = _put(store, topic.full_name, str(topic.pk))
    stray = _put(store, "acme.gone", str(topic.pk + 1000))
    reused_name = _put(store, topic.full_name, str(topic.pk + 2000))  # an older incarnation
    unmanaged = _put(store, "acme.free", "")  # written without an id: never a stray

    deleted = tiering.clean_remote_store(cluster.pk)

    assert sorted(deleted) == sorted(
        [("acme.gone", str(topic.pk + 1000)), (topic.full_name, str(topic.pk + 2000))]
    )
    assert store.exists(live)
    assert store.exists(unmanaged)
    assert not store.exists(stray)
    assert not store.exists(reused_name)
    assert tasks.clean_remote_stores() == {str(cluster.pk): 0}  # nothing left to do


def test_deleting_the_topics_objects_takes_its_incarnation_only(
    store: ObjectStore, topic: Topic
) -> None:
    own = _put(store, topic.full_name, str(topic.pk))
    other = _put(store, topic.full_name, str(topic.pk + 1))

    assert tiering.delete_remote_objects(topic) == 1

    assert not store.exists(own)
    assert store.exists(other)


def test_a_store_that_does_not_answer_holds_nothing_up(
    cluster: Cluster, topic: Topic, monkeypatch: pytest.MonkeyPatch
) -> None:
    def unreachable(cluster: Cluster) -> ObjectStore:
        raise RemoteStoreUnavailableError("the store did not answer")

    monkeypatch.setattr(tiering, "open_store", unreachable)

    assert tiering.delete_remote_objects(topic) == 0
    assert tasks.clean_remote_stores() == {}  # logged; the next run tries again
