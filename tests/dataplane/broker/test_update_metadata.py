"""UpdateMetadata: the controller's push to real broker processes — accepted and served,
stale epochs refused, kept across a restart while no controller runs."""

from __future__ import annotations

from pathlib import Path

from dataplane._gen.meridian.v1 import admin_pb2, common_pb2
from dataplane.errors import ErrorCode
from tests.dataplane.broker.support import TIMEOUT_S, create, rpc_error, stubs
from tests.support.brokers import BrokerProcess, metadata


def _push(
    epoch: int,
    *,
    leaders: dict[tuple[str, int], tuple[int, int]],
    brokers: dict[int, int],
    cluster_id: str = "meridian",
    controller: str = "ctl-a",
) -> admin_pb2.UpdateMetadataRequest:
    """A push naming ``leaders`` ((topic, partition) -> (leader id, leader epoch)) and
    ``brokers`` (id -> port on 127.0.0.1)."""
    topics: dict[str, list[admin_pb2.MetadataPartition]] = {}
    for (topic, partition), (leader, leader_epoch) in sorted(leaders.items()):
        topics.setdefault(topic, []).append(
            admin_pb2.MetadataPartition(
                partition=partition, leader_id=leader, leader_epoch=leader_epoch, replicas=[leader]
            )
        )
    return admin_pb2.UpdateMetadataRequest(
        controller_id=controller,
        controller_epoch=epoch,
        cluster_id=cluster_id,
        brokers=[
            common_pb2.BrokerInfo(id=i, host="127.0.0.1", port=port, region="local")
            for i, port in sorted(brokers.items())
        ],
        topics=[admin_pb2.MetadataTopic(name=n, partitions=p) for n, p in topics.items()],
    )


def _placement(broker: BrokerProcess, *topics: str) -> dict[tuple[str, int], tuple[int, int]]:
    response = metadata(broker, topics)
    return {
        (t.name, p.partition): (p.leader_id, p.leader_epoch)
        for t in response.topics
        for p in t.partitions
        if not t.name.startswith("__")
    }


def test_a_push_is_answered_with_the_brokers_heartbeat(broker: BrokerProcess) -> None:
    with stubs(broker) as s:
        create(s, "acme.hosted", partitions=2)
        answer = s.admin.UpdateMetadata(
            _push(3, leaders={}, brokers={1: broker.port}), timeout=TIMEOUT_S
        )
    assert answer.broker_id == 1
    assert answer.health == "ok"
    assert answer.controller_epoch == 3
    assert answer.hosted_topics >= 1
    assert answer.hosted_partitions >= 2  # its __consumer_offsets partitions count too
    assert answer.offline_partitions == 0
    assert answer.version


def test_metadata_is_served_from_the_push_merged_with_hosted_partitions(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.local")
        push = _push(
            1,
            leaders={
                ("acme.remote", 0): (2, 4),
                ("acme.remote", 1): (3, 0),
                ("acme.local", 0): (1, 7),
                ("acme.moved", 0): (2, 1),  # hosted here too: the push still decides
            },
            brokers={1: broker.port, 2: 50002, 3: 50003},
        )
        create(s, "acme.moved")
        s.admin.UpdateMetadata(push, timeout=TIMEOUT_S)
    assert _placement(broker, "acme.remote", "acme.local", "acme.moved") == {
        ("acme.remote", 0): (2, 4),
        ("acme.remote", 1): (3, 0),
        ("acme.local", 0): (1, 7),
        ("acme.moved", 0): (2, 1),
    }
    response = metadata(broker)
    assert sorted((b.id, b.port) for b in response.brokers) == [
        (1, broker.port),
        (2, 50002),
        (3, 50003),
    ]


def test_a_push_with_an_older_controller_epoch_is_refused(broker: BrokerProcess) -> None:
    ports = {1: broker.port}
    with stubs(broker) as s:
        s.admin.UpdateMetadata(
            _push(5, leaders={("acme.t", 0): (1, 0)}, brokers=ports, controller="new"),
            timeout=TIMEOUT_S,
        )
        stale = _push(4, leaders={("acme.t", 0): (9, 9)}, brokers=ports, controller="old")
        error = rpc_error(s.admin.UpdateMetadata, stale)
        assert error.code == ErrorCode.STALE_CONTROLLER_EPOCH
        assert not error.retriable
        again = s.admin.UpdateMetadata(
            _push(5, leaders={("acme.t", 0): (1, 1)}, brokers=ports), timeout=TIMEOUT_S
        )
    assert again.controller_epoch == 5
    assert _placement(broker, "acme.t") == {("acme.t", 0): (1, 1)}


def test_a_push_for_another_cluster_is_refused(broker: BrokerProcess) -> None:
    with stubs(broker) as s:
        error = rpc_error(
            s.admin.UpdateMetadata, _push(1, leaders={}, brokers={}, cluster_id="other")
        )
    assert error.code == ErrorCode.INVALID_REQUEST
    assert "other" in error.message
    with stubs(broker) as s:
        unnamed = rpc_error(s.admin.UpdateMetadata, _push(1, leaders={}, brokers={}, cluster_id=""))
    assert unnamed.code == ErrorCode.INVALID_REQUEST
    assert "cluster_id" in unnamed.message


def test_the_push_and_its_epoch_survive_a_restart_with_no_controller(
    broker: BrokerProcess,
) -> None:
    push = _push(7, leaders={("acme.far", 0): (2, 3)}, brokers={1: broker.port, 2: 50002})
    with stubs(broker) as s:
        s.admin.UpdateMetadata(push, timeout=TIMEOUT_S)
    broker.restart()  # SIGKILL: the push must already be on disk
    assert _placement(broker, "acme.far") == {("acme.far", 0): (2, 3)}
    with stubs(broker) as s:
        error = rpc_error(s.admin.UpdateMetadata, _push(6, leaders={}, brokers={}))
    assert error.code == ErrorCode.STALE_CONTROLLER_EPOCH


def test_an_unreadable_persisted_push_is_ignored_at_start(broker: BrokerProcess) -> None:
    broker.kill()
    Path(broker.data_dir, "controller-metadata.bin").write_bytes(b"\xff\xff not a push")
    broker.start()
    assert _placement(broker, "acme.far") == {}
    with stubs(broker) as s:
        answer = s.admin.UpdateMetadata(_push(1, leaders={}, brokers={}), timeout=TIMEOUT_S)
    assert answer.controller_epoch == 1
