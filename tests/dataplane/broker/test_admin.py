"""Admin: create, delete, alter and describe partitions, idempotently, with typed errors."""

from __future__ import annotations

import pytest

from dataplane._gen.meridian.v1 import admin_pb2, common_pb2
from dataplane.errors import ErrorCode
from tests.dataplane.broker.support import fetch_records, produce, stubs, values_batch
from tests.support.brokers import BrokerProcess, stop_all


@pytest.fixture(scope="module")
def s(tmp_path_factory):
    process = BrokerProcess(tmp_path_factory.mktemp("admin") / "broker", broker_id=1).start()
    try:
        with stubs(process) as connected:
            yield connected
    finally:
        stop_all([process])


def spec(topic, partition=0, **config):
    return admin_pb2.PartitionSpec(
        topic=topic, partition=partition, config=common_pb2.PartitionConfig(**config)
    )


def create(s, *specs, validate_only=False):
    request = admin_pb2.CreatePartitionsRequest(partitions=specs, validate_only=validate_only)
    return list(s.admin.CreatePartitions(request, timeout=10).results)


def alter(s, *specs, validate_only=False):
    request = admin_pb2.AlterPartitionConfigsRequest(partitions=specs, validate_only=validate_only)
    return list(s.admin.AlterPartitionConfigs(request, timeout=10).results)


def delete(s, topic, partition=0):
    request = admin_pb2.DeletePartitionsRequest(
        partitions=[common_pb2.TopicPartition(topic=topic, partition=partition)]
    )
    return list(s.admin.DeletePartitions(request, timeout=10).results)


def describe(s, topic):
    response = s.admin.DescribeState(admin_pb2.DescribeStateRequest(topics=[topic]), timeout=10)
    return response, {p.partition: p for p in response.partitions}


def outcome(results):
    return [(r.error, r.changed) for r in results]


def test_create_is_idempotent_and_conflicting_configs_are_refused(s):
    assert outcome(create(s, spec("acme.a", 0), spec("acme.a", 1))) == [(0, True), (0, True)]
    assert outcome(create(s, spec("acme.a", 0), spec("acme.a", 1))) == [(0, False), (0, False)]
    (conflict,) = create(s, spec("acme.a", 0, retention_ms=1000))
    assert conflict.error == ErrorCode.TOPIC_ALREADY_EXISTS
    assert "retention_ms" in conflict.error_message


def test_validate_only_creates_nothing(s):
    assert outcome(create(s, spec("acme.dry"), validate_only=True)) == [(0, True)]
    _, states = describe(s, "acme.dry")
    assert states == {}


def test_describe_gives_the_effective_config_and_offsets(s):
    create(s, spec("acme.desc", 0, durability="never", timestamp_type="LogAppendTime"))
    assert produce(s, "acme.desc", 0, values_batch([b"1", b"2", b"3"])).log_append_time_ms > 0
    response, states = describe(s, "acme.desc")
    state = states[0]
    assert (response.broker_id, response.region, response.cluster_id) == (1, "local", "meridian")
    assert response.uptime_ms >= 0
    assert response.version
    for field in common_pb2.PartitionConfig.DESCRIPTOR.fields:
        assert state.config.HasField(field.name), f"{field.name} is not set"
    assert (state.config.durability, state.config.timestamp_type) == ("never", "LogAppendTime")
    assert (state.log_start_offset, state.log_end_offset, state.high_watermark) == (0, 3, 3)
    assert state.size_bytes > 0
    assert state.segments == 1
    assert (state.role, state.offline) == ("leader", False)


def test_alter_changes_only_the_set_fields(s):
    create(s, spec("acme.alt", retention_ms=60_000, max_message_bytes=2048))
    assert outcome(alter(s, spec("acme.alt", retention_ms=120_000))) == [(0, True)]
    assert outcome(alter(s, spec("acme.alt", retention_ms=120_000))) == [(0, False)]
    assert outcome(alter(s, spec("acme.alt", segment_ms=5), validate_only=True)) == [(0, True)]
    _, states = describe(s, "acme.alt")
    config = states[0].config
    assert (config.retention_ms, config.max_message_bytes) == (120_000, 2048)
    assert config.segment_ms != 5
    (missing,) = alter(s, spec("acme.none", retention_ms=1))
    assert missing.error == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_delete_is_idempotent_and_removes_the_data(s):
    create(s, spec("acme.gone"))
    produce(s, "acme.gone", 0, values_batch([b"bye"]))
    assert outcome(delete(s, "acme.gone")) == [(0, True)]
    assert outcome(delete(s, "acme.gone")) == [(0, False)]
    assert produce(s, "acme.gone", 0, values_batch([b"x"])).error == (
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    )
    create(s, spec("acme.gone"))
    assert fetch_records(s, "acme.gone") == [], "a re-created partition starts empty"


@pytest.mark.parametrize(
    "topic",
    ["orders", "acme.", ".orders", "acme.orders~", "ac me.orders", "acme.ord/ers", "a" * 300,
     "__consumer_offsets", "__acme.x", "acme~lane.orders", "acme.orders~a~b", ""],
)  # fmt: skip
def test_bad_topic_names_are_refused(s, topic):
    (result,) = create(s, spec(topic))
    assert result.error == ErrorCode.INVALID_TOPIC, result
    assert result.error_message


@pytest.mark.parametrize("topic", ["acme.orders", "acme.orders~ppe", "acme-1.a_b.c-d~boe-alice"])
def test_tenant_and_lane_topic_names_are_accepted(s, topic):
    assert outcome(create(s, spec(topic))) in ([(0, True)], [(0, False)])


@pytest.mark.parametrize(
    "config",
    [
        {"durability": "sometimes"},
        {"timestamp_type": "WallTime"},
        {"max_segment_bytes": 10},
        {"retention_ms": -5},
        {"flush_interval_ms": 0},
        {"max_message_bytes": 3},
    ],
)
def test_bad_configs_are_refused_on_create_and_alter(s, config):
    (created,) = create(s, spec("acme.cfg", **config))
    assert created.error == ErrorCode.INVALID_CONFIG, created
    create(s, spec("acme.cfg-ok"))
    (altered,) = alter(s, spec("acme.cfg-ok", **config))
    assert altered.error == ErrorCode.INVALID_CONFIG, altered
    _, states = describe(s, "acme.cfg")
    assert states == {}


def test_bad_partitions_and_internal_deletes_are_refused(s):
    (negative,) = create(s, spec("acme.neg", -1))
    assert negative.error == ErrorCode.INVALID_PARTITIONS
    (internal,) = delete(s, "__consumer_offsets", 0)
    assert internal.error == ErrorCode.INVALID_TOPIC
    response, _ = describe(s, "__consumer_offsets")
    assert len(response.partitions) == 16, "every offsets partition is still hosted"
