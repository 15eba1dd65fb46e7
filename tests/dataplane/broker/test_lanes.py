"""Lanes on a real broker process: how a lane topic is answered from the declared lanes
of the controller's push (pending, not found, deleted lane), the demands, lane consumers
and activity in the push's answer, orphaned lane topics in trunk metadata, metrics."""

from __future__ import annotations

import urllib.request

from dataplane._gen.meridian.v1 import (
    admin_pb2,
    broker_pb2,
    common_pb2,
    group_pb2,
    group_pb2_grpc,
)
from dataplane.broker.lanes import BrokerLanes, LaneTable
from dataplane.errors import ErrorCode, is_retriable
from tests.dataplane.broker.groups.support import RawMember
from tests.dataplane.broker.support import (
    TIMEOUT_S,
    Stubs,
    create,
    end_offset,
    fetch_records,
    produce,
    stubs,
    values_batch,
)
from tests.support.brokers import BrokerProcess, metadata

SESSION = {"session_timeout_ms": 30_000, "rebalance_timeout_ms": 30_000}


def lane(name: str, tenant: str = "acme", **fields: object) -> admin_pb2.LaneDeclaration:
    fields.setdefault("all_topics", True)
    fields.setdefault("orphan_policy", "trunk")
    return admin_pb2.LaneDeclaration(tenant=tenant, name=name, **fields)  # type: ignore[arg-type]


def push(
    s: Stubs,
    broker: BrokerProcess,
    epoch: int,
    lanes: list[admin_pb2.LaneDeclaration],
    *,
    listed: bool = True,
    topics: tuple[str, ...] = (),
) -> admin_pb2.UpdateMetadataResponse:
    """Push ``lanes`` (and ``topics``, one partition each, led here); the heartbeat."""
    request = admin_pb2.UpdateMetadataRequest(
        controller_id="test",
        controller_epoch=epoch,
        cluster_id="meridian",
        brokers=[common_pb2.BrokerInfo(id=1, host="127.0.0.1", port=broker.port)],
        topics=[
            admin_pb2.MetadataTopic(
                name=name,
                partitions=[
                    admin_pb2.MetadataPartition(
                        partition=0, leader_id=1, leader_epoch=0, replicas=[1], isr=[1]
                    )
                ],
            )
            for name in topics
        ],
        lanes=lanes,
        lanes_listed=listed,
    )
    return s.admin.UpdateMetadata(request, timeout=TIMEOUT_S)


def produce_error(s: Stubs, topic: str, value: bytes = b"x") -> tuple[int, str]:
    result = produce(s, topic, 0, values_batch([value]))
    return result.error, result.error_message


def topic_meta(broker: BrokerProcess, topic: str) -> broker_pb2.TopicMetadata:
    (answer,) = metadata(broker, [topic]).topics
    return answer


def test_a_missing_lane_topic_is_pending_only_for_a_declared_lane_covering_an_existing_trunk(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.orders")
        push(
            s,
            broker,
            1,
            [
                lane("ppe", consume_trunk=True),
                lane("only", all_topics=False, topics=["acme.audit"]),
            ],
        )
        pending = produce_error(s, "acme.orders~ppe")
        undeclared = produce_error(s, "acme.orders~nope")
        uncovered = produce_error(s, "acme.orders~only")
        no_trunk = produce_error(s, "acme.missing~ppe")
        other_tenant = produce_error(s, "beta.orders~ppe")
        assert end_offset(s, "acme.orders") == 0  # nothing fell into the trunk
    assert pending[0] == ErrorCode.LANE_TOPIC_PENDING
    assert is_retriable(pending[0])
    for code, _ in (undeclared, uncovered, no_trunk, other_tenant):
        assert code == ErrorCode.LANE_NOT_FOUND
        assert not is_retriable(code)
    assert "not declared" in undeclared[1]
    assert "does not cover" in uncovered[1]
    assert "does not exist" in no_trunk[1]
    assert "'beta'" in other_tenant[1]

    asked = topic_meta(broker, "acme.orders~ppe")
    assert (asked.error, asked.trunk, asked.consume_trunk) == (
        ErrorCode.LANE_TOPIC_PENDING,
        "acme.orders",
        True,
    )
    assert not asked.partitions
    refused = topic_meta(broker, "acme.orders~nope")
    assert (refused.error, refused.trunk) == (ErrorCode.LANE_NOT_FOUND, "acme.orders")
    # An every-topic answer lists only what exists: no lane topic error in it.
    listed = {t.name: t.error for t in metadata(broker).topics}
    assert "acme.orders~ppe" not in listed
    assert set(listed.values()) == {0}


def test_demands_are_reported_at_every_push_until_a_push_lists_the_topic(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.orders")
        create(s, "acme.audit")
        lanes = [lane("ppe")]
        assert list(push(s, broker, 1, lanes).lane_topic_demands) == []
        assert produce_error(s, "acme.orders~ppe")[0] == ErrorCode.LANE_TOPIC_PENDING
        assert topic_meta(broker, "acme.audit~ppe").error == ErrorCode.LANE_TOPIC_PENDING
        assert produce_error(s, "acme.orders~nope")[0] == ErrorCode.LANE_NOT_FOUND
        wanted = {"acme.orders~ppe", "acme.audit~ppe"}
        assert set(push(s, broker, 2, lanes).lane_topic_demands) == wanted
        assert set(push(s, broker, 3, lanes).lane_topic_demands) == wanted  # repeated
        answer = push(s, broker, 4, lanes, topics=("acme.orders~ppe",))
        assert list(answer.lane_topic_demands) == ["acme.audit~ppe"]
        create(s, "acme.orders~ppe")
        assert produce_error(s, "acme.orders~ppe")[0] == ErrorCode.NONE
        answer = push(s, broker, 5, lanes, topics=("acme.orders~ppe", "acme.audit~ppe"))
        assert list(answer.lane_topic_demands) == []
        assert list(push(s, broker, 6, lanes).lane_topic_demands) == []


def test_a_lane_topic_of_a_deleted_lane_refuses_records_and_leaves_the_trunk_alone(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.orders")
        create(s, "acme.orders~ppe")
        # No controller has pushed: lane topics that exist are plain topics.
        assert produce_error(s, "acme.orders~ppe", b"early")[0] == ErrorCode.NONE
        assert produce_error(s, "acme.orders~gone")[0] == ErrorCode.LANE_NOT_FOUND
        push(s, broker, 1, [lane("ppe")], topics=("acme.orders", "acme.orders~ppe"))
        assert produce_error(s, "acme.orders~ppe", b"declared")[0] == ErrorCode.NONE
        push(s, broker, 2, [lane("other")])
        code, message = produce_error(s, "acme.orders~ppe", b"deleted")
        assert code == ErrorCode.LANE_NOT_FOUND
        assert "no longer declared" in message
        push(s, broker, 3, [lane("ppe", all_topics=False, topics=["acme.audit"])])
        assert produce_error(s, "acme.orders~ppe", b"uncovered")[0] == ErrorCode.LANE_NOT_FOUND
        assert [r.value for r in fetch_records(s, "acme.orders~ppe")] == [b"early", b"declared"]
        assert end_offset(s, "acme.orders") == 0
        push(s, broker, 4, [], listed=False)  # a push that does not list lanes
        assert produce_error(s, "acme.orders~ppe", b"plain")[0] == ErrorCode.NONE
    meta = topic_meta(broker, "acme.orders~ppe")
    assert (meta.error, meta.trunk, len(meta.partitions)) == (0, "acme.orders", 1)


def test_a_hosted_lane_topic_the_push_no_longer_lists_refuses_records_retriably(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.orders")
        create(s, "acme.orders~ppe")
        lanes = [lane("ppe")]
        push(s, broker, 1, lanes, topics=("acme.orders", "acme.orders~ppe"))
        assert produce_error(s, "acme.orders~ppe", b"kept")[0] == ErrorCode.NONE
        # The controller deletes the lane topic: the push drops it before the reconciler
        # deletes its partitions here. A record appended now would be acknowledged, then
        # lost with the partition.
        push(s, broker, 2, lanes, topics=("acme.orders",))
        code, message = produce_error(s, "acme.orders~ppe", b"lost")
        assert code == ErrorCode.LANE_TOPIC_PENDING, message
        assert is_retriable(code)
        assert [r.value for r in fetch_records(s, "acme.orders~ppe")] == [b"kept"]
        assert end_offset(s, "acme.orders") == 0
        # Still hosted: no demand (it would make the controller recreate it at once).
        assert list(push(s, broker, 3, lanes, topics=("acme.orders",)).lane_topic_demands) == []
        s.admin.DeletePartitions(
            admin_pb2.DeletePartitionsRequest(
                partitions=[common_pb2.TopicPartition(topic="acme.orders~ppe", partition=0)]
            ),
            timeout=TIMEOUT_S,
        )
        # Gone: the producer's next try demands it, and the lane topic is made again.
        assert produce_error(s, "acme.orders~ppe")[0] == ErrorCode.LANE_TOPIC_PENDING
        answer = push(s, broker, 4, lanes, topics=("acme.orders",))
        assert list(answer.lane_topic_demands) == ["acme.orders~ppe"]


def committed(s: Stubs, group_id: str, *partitions: tuple[str, int]) -> list[int]:
    """The offsets OffsetFetch answers for ``group_id`` (-1: none committed)."""
    request = group_pb2.OffsetFetchRequest(
        group_id=group_id, partitions=[{"topic": t, "partition": p} for t, p in partitions]
    )
    results = group_pb2_grpc.GroupCoordinatorStub(s.channel).OffsetFetch(request).results
    assert all(r.error == ErrorCode.NONE for r in results), results
    found = {(r.topic, r.partition): r.offset for r in results}
    return [found[tp] for tp in partitions]


def test_commits_of_a_deleted_lane_topic_are_dropped_so_it_starts_afresh_when_made_again(
    broker: BrokerProcess,
) -> None:
    lanes = [lane("ppe"), lane("dev")]
    ppe, dev, trunk = ("acme.orders~ppe", 0), ("acme.orders~dev", 0), ("acme.orders", 0)
    everything = ("acme.orders", "acme.orders~ppe", "acme.orders~dev")
    without_ppe = ("acme.orders", "acme.orders~dev")
    outside = {"generation_id": -1, "member_id": ""}
    with stubs(broker) as s:
        for topic in everything:
            create(s, topic)
        push(s, broker, 1, lanes, topics=everything)
        trunk_group = RawMember(s.channel, "acme.g")
        lane_group = RawMember(s.channel, "acme.g~ppe")
        trunk_group.commit({ppe: 5000, trunk: 70, dev: 9}, **outside)
        lane_group.commit({ppe: 4000}, **outside)
        assert committed(s, "acme.g~ppe", ppe) == [5000]  # the fence's max of the family

        push(s, broker, 2, lanes, topics=without_ppe)  # the lane topic is being deleted
        assert committed(s, "acme.g~ppe", ppe) == [-1]
        assert committed(s, "acme.g", ppe, trunk, dev) == [-1, 70, 9]
        # A consumer giving the partition up commits after that push: the next push
        # (the same lane topics) drops it too.
        trunk_group.commit({ppe: 5100}, **outside)
        push(s, broker, 3, lanes, topics=without_ppe)
        assert committed(s, "acme.g", ppe) == [-1]

        push(s, broker, 4, lanes, topics=everything)  # made again
        lane_group.commit({ppe: 3}, **outside)
        push(s, broker, 5, lanes, topics=everything)
        assert committed(s, "acme.g", ppe, trunk, dev) == [3, 70, 9]
        # A push that does not list lanes (no controller manages them) drops nothing.
        push(s, broker, 6, [], listed=False, topics=("acme.orders",))
        assert committed(s, "acme.g", ppe, trunk, dev) == [3, 70, 9]
        push(s, broker, 7, lanes, topics=without_ppe)
    broker.restart()
    with stubs(broker) as s:  # the drop is in the offsets log
        assert committed(s, "acme.g", ppe, trunk, dev) == [-1, 70, 9]
        assert committed(s, "acme.g~ppe", ppe) == [-1]


def test_trunk_metadata_lists_lane_topics_orphaned_to_the_trunk(broker: BrokerProcess) -> None:
    with stubs(broker) as s:
        for topic in (
            "acme.orders",
            "acme.audit",
            "acme.orders~away",
            "acme.orders~held",
            "acme.orders~live",
            "acme.orders~gone",
            "acme.audit~away",
            "acme.orders~elsewhere",
        ):
            create(s, topic)
        push(
            s,
            broker,
            1,
            [
                lane("away"),
                lane("held", orphan_policy="hold"),
                lane("live", live_topics=["acme.orders"]),
                lane("elsewhere", all_topics=False, topics=["acme.audit"]),
            ],
        )
    trunk = topic_meta(broker, "acme.orders")
    assert list(trunk.orphaned_lane_topics) == ["acme.orders~away"]
    assert list(topic_meta(broker, "acme.audit").orphaned_lane_topics) == ["acme.audit~away"]
    everything = {t.name: t for t in metadata(broker).topics}
    assert list(everything["acme.orders"].orphaned_lane_topics) == ["acme.orders~away"]
    assert everything["acme.orders~held"].trunk == "acme.orders"
    assert everything["acme.orders~held"].error == 0
    assert not everything["acme.orders"].trunk
    with stubs(broker) as s:  # the lane comes alive: its topic goes back to the lane
        push(s, broker, 2, [lane("away", live_topics=["acme.orders"])])
    assert list(topic_meta(broker, "acme.orders").orphaned_lane_topics) == []


def test_the_push_answer_reports_lane_consumers_and_lane_topic_activity(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.orders")
        create(s, "acme.orders~ppe")
        create(s, "acme.orders~idle")
        idle = push(
            s,
            broker,
            1,
            [lane("ppe"), lane("idle")],
            topics=("acme.orders", "acme.orders~ppe", "acme.orders~idle"),
        )
        assert {(a.topic, a.last_append_ms, a.last_fetch_ms) for a in idle.lane_activity} == {
            ("acme.orders~ppe", 0, 0),
            ("acme.orders~idle", 0, 0),
        }
        assert produce_error(s, "acme.orders~ppe")[0] == ErrorCode.NONE
        appended = {a.topic: a for a in push(s, broker, 2, []).lane_activity}
        assert appended["acme.orders~ppe"].last_append_ms > 0
        assert appended["acme.orders~ppe"].last_fetch_ms == 0
        fetch_records(s, "acme.orders~ppe")
        fetched = {a.topic: a for a in push(s, broker, 3, []).lane_activity}
        assert (
            fetched["acme.orders~ppe"].last_fetch_ms >= appended["acme.orders~ppe"].last_append_ms
        )
        assert (
            fetched["acme.orders~idle"].last_append_ms,
            fetched["acme.orders~idle"].last_fetch_ms,
        ) == (0, 0)

        subscription = group_pb2.ConsumerSubscription(
            topics=["acme.orders~ppe", "acme.orders"]
        ).SerializeToString()
        lane_member = RawMember(
            s.channel, "acme.billing~ppe", protocols=(("range", subscription),), **SESSION
        )
        trunk_member = RawMember(
            s.channel, "acme.billing", protocols=(("range", subscription),), **SESSION
        )
        garbled = RawMember(
            s.channel, "acme.other~ppe", protocols=(("range", b"\xff\xff"),), **SESSION
        )
        for member in (lane_member, trunk_member, garbled):
            member.join()
        consumers = {c.group_id: list(c.topics) for c in push(s, broker, 4, []).lane_consumers}
        assert consumers == {"acme.billing~ppe": ["acme.orders~ppe"], "acme.other~ppe": []}
        lane_member.leave()
        garbled.leave()
        assert list(push(s, broker, 5, []).lane_consumers) == []


def test_lane_activity_is_kept_only_for_lane_topics_led_here(broker: BrokerProcess) -> None:
    topics = ("acme.orders", "acme.orders~ppe")
    lanes = [lane("ppe")]
    with stubs(broker) as s:
        create(s, "acme.orders")
        # Fetches naming lane topics hosted nowhere record nothing.
        names = ["acme.orders~ppe", *(f"acme.orders~n{i:04d}" for i in range(50))]
        request = broker_pb2.FetchRequest(
            max_wait_ms=0,
            partitions=[broker_pb2.FetchPartition(topic=name, partition=0) for name in names],
        )
        s.broker.Fetch(request, timeout=TIMEOUT_S)
        create(s, "acme.orders~ppe")
        activity = {a.topic: a for a in push(s, broker, 1, lanes, topics=topics).lane_activity}
        assert set(activity) == {"acme.orders~ppe"}
        assert activity["acme.orders~ppe"].last_fetch_ms == 0

        assert produce_error(s, "acme.orders~ppe")[0] == ErrorCode.NONE
        fetch_records(s, "acme.orders~ppe")
        (active,) = push(s, broker, 2, lanes, topics=topics).lane_activity
        assert active.last_append_ms > 0
        assert active.last_fetch_ms > 0
        # Deleted, then made again: the new lane topic starts idle.
        s.admin.DeletePartitions(
            admin_pb2.DeletePartitionsRequest(
                partitions=[common_pb2.TopicPartition(topic="acme.orders~ppe", partition=0)]
            ),
            timeout=TIMEOUT_S,
        )
        assert list(push(s, broker, 3, lanes, topics=("acme.orders",)).lane_activity) == []
        create(s, "acme.orders~ppe")
        (again,) = push(s, broker, 4, lanes, topics=topics).lane_activity
        assert (again.topic, again.last_append_ms, again.last_fetch_ms) == ("acme.orders~ppe", 0, 0)


def test_lane_metrics_count_refusals_pending_demands_and_handover_fences(
    broker: BrokerProcess,
) -> None:
    with stubs(broker) as s:
        create(s, "acme.orders")
        push(s, broker, 1, [lane("ppe")])
        produce_error(s, "acme.orders~ppe")
        produce_error(s, "acme.orders~ppe")
        produce_error(s, "acme.orders~nope")
        holder = RawMember(s.channel, "acme.billing", **SESSION)
        holder.join()
        held = group_pb2.ConsumerAssignment(partitions=[{"topic": "acme.orders~ppe"}])
        holder.sync({holder.member_id: held.SerializeToString()})
        fetch = group_pb2.OffsetFetchRequest(
            group_id="acme.billing~ppe", partitions=[{"topic": "acme.orders~ppe"}]
        )
        (fenced,) = group_pb2_grpc.GroupCoordinatorStub(s.channel).OffsetFetch(fetch).results
        assert fenced.error == ErrorCode.HANDOVER_IN_PROGRESS
    with urllib.request.urlopen(broker.metrics_url, timeout=TIMEOUT_S) as response:
        text = response.read().decode()
    assert 'meridian_broker_lane_produce_refusals_total{error="LANE_TOPIC_PENDING"} 2.0' in text
    assert 'meridian_broker_lane_produce_refusals_total{error="LANE_NOT_FOUND"} 1.0' in text
    assert "meridian_broker_lane_topic_demands 1.0" in text
    assert "meridian_broker_lane_handover_refusals_total 1.0" in text


def test_the_demand_set_is_bounded_and_forgets_the_oldest_first() -> None:
    request = admin_pb2.UpdateMetadataRequest(lanes=[lane("ppe")], lanes_listed=True)
    lanes = BrokerLanes(LaneTable(lambda: request), max_demands=2)
    known = {"acme.a", "acme.b", "acme.c"}
    for trunk in ("acme.a", "acme.b", "acme.c", "acme.b"):
        assert lanes.missing(f"{trunk}~ppe", known).code == ErrorCode.LANE_TOPIC_PENDING
    assert lanes.demands() == ["acme.c~ppe", "acme.b~ppe"]


def test_a_declaration_breaking_the_lane_rules_is_left_out_not_the_push() -> None:
    request = admin_pb2.UpdateMetadataRequest(
        lanes=[lane("ok-lane"), lane("Bad_Name"), lane("dropper", orphan_policy="drop")],
        lanes_listed=True,
    )
    table = LaneTable(lambda: request)
    assert table.spec("acme", "ok-lane") is not None
    assert table.spec("acme", "Bad_Name") is None
    assert table.spec("acme", "dropper") is None
    lanes = BrokerLanes(table)
    assert lanes.missing("acme.t~dropper", {"acme.t"}).code == ErrorCode.LANE_NOT_FOUND
