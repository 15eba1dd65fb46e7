"""Replication between three real brokers, driven by a test-side controller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2
from dataplane.errors import ErrorCode
from dataplane.storage.log import PartitionLog
from tests.dataplane.broker.support import (
    end_offset,
    fetch_records,
    produce,
    stubs,
    values_batch,
    wait_for,
)
from tests.support.brokers import BrokerProcess
from tests.support.replication import pause, resume

from .conftest import Replicas

TOPIC = "acme.replicated"


def _state(broker: BrokerProcess, topic: str, partition: int = 0) -> admin_pb2.PartitionState:
    with stubs(broker) as s:
        response = s.admin.DescribeState(admin_pb2.DescribeStateRequest(topics=[topic]), timeout=10)
    return next(p for p in response.partitions if p.partition == partition)


def _log_bytes(broker: BrokerProcess, topic: str, partition: int, upto: int) -> bytes:
    """The bytes of the stopped broker's log for ``topic-partition`` up to ``upto``."""
    log = PartitionLog.open(Path(broker.data_dir) / f"{topic}-{partition}")
    try:
        out, offset = b"", log.log_start_offset
        while offset < upto:
            read = log.read(offset, 1 << 20, max_offset=upto)
            if not read.data:
                break
            out += read.data
            offset = read.next_offset
        return out
    finally:
        log.close()


def test_followers_catch_up_and_hold_identical_logs(replicas: Replicas) -> None:
    replicas.controller.create_topic(TOPIC, [1, 2, 3], partitions=2, min_isr=2)
    with stubs(replicas[1]) as s:
        for i in range(20):
            for partition in (0, 1):
                batch = values_batch([b"r%d-%d" % (i, n) for n in range(5)])
                result = produce(s, TOPIC, partition, batch, acks=-1)
                assert result.error == 0, result
    states = {b: [_state(replicas[b], TOPIC, p) for p in (0, 1)] for b in (1, 2, 3)}
    assert [s.role for s in states[1]] == ["leader", "leader"]
    assert [s.role for s in states[2]] == ["follower", "follower"]
    assert all(s.high_watermark == 100 for s in states[1])
    assert wait_for(
        lambda: all(
            _state(replicas[b], TOPIC, p).log_end_offset == 100 for b in (2, 3) for p in (0, 1)
        )
    )
    for broker in replicas.brokers.values():
        broker.terminate()
    for partition in (0, 1):
        copies = {_log_bytes(replicas[b], TOPIC, partition, 100) for b in (1, 2, 3)}
        assert len(copies) == 1
        assert len(next(iter(copies))) > 0


def _produce_request(
    topic: str, values: list[bytes], *, acks: int, timeout_ms: int = 15_000
) -> Any:
    return broker_pb2.ProduceRequest(
        acks=acks,
        timeout_ms=timeout_ms,
        partitions=[
            broker_pb2.PartitionRecords(topic=topic, partition=0, records=values_batch(values))
        ],
    )


def test_acks_all_waits_for_the_isr_and_a_paused_follower_leaves_and_rejoins(
    replicas: Replicas,
) -> None:
    controller = replicas.controller
    controller.auto_commit = False
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    with stubs(replicas[1]) as s:
        assert produce(s, TOPIC, 0, values_batch([b"before"]), acks=-1).error == 0
        pause(replicas[3])
        try:
            call = s.broker.Produce.future(_produce_request(TOPIC, [b"stalled"], acks=-1))
            controller.wait_for_proposal(TOPIC, 0, [1, 2])
            # Proposed, not committed: broker 3 still counts, so the append is not acked.
            assert not call.done()
            state = _state(replicas[1], TOPIC)
            assert (state.log_end_offset, state.high_watermark) == (2, 1)
            # Consumers see nothing above the high watermark.
            assert [r.value for r in fetch_records(s, TOPIC)] == [b"before"]
            assert end_offset(s, TOPIC) == 1
            assert controller.commit(TOPIC, 0) == [1, 2]
            (result,) = call.result(timeout=15).results
            assert (result.error, result.base_offset) == (0, 1)
            assert produce(s, TOPIC, 0, values_batch([b"while paused"]), acks=-1).error == 0
        finally:
            resume(replicas[3])
        controller.wait_for_proposal(TOPIC, 0, [1, 2, 3])
        assert controller.commit(TOPIC, 0) == [1, 2, 3]
        assert wait_for(lambda: _state(replicas[3], TOPIC).log_end_offset == 3)
        assert _state(replicas[1], TOPIC).high_watermark == 3
        response = s.broker.Metadata(broker_pb2.MetadataRequest(topics=[TOPIC]), timeout=10)
        (partition,) = response.topics[0].partitions
        assert list(partition.isr) == [1, 2, 3]


def test_acks_all_is_refused_while_the_isr_is_below_min_insync_replicas(
    replicas: Replicas,
) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=3)
    replicas[3].kill()
    controller.wait_for_isr(TOPIC, 0, [1, 2])
    controller.push()  # the leader has the shrunk ISR before the produce (not while waiting)
    with stubs(replicas[1]) as s:
        refused = produce(s, TOPIC, 0, values_batch([b"all"]), acks=-1)
        assert refused.error == ErrorCode.NOT_ENOUGH_REPLICAS
        assert produce(s, TOPIC, 0, values_batch([b"one"]), acks=1).error == 0
        # Visible once broker 2 (the rest of the ISR) has it.
        assert wait_for(lambda: [r.value for r in fetch_records(s, TOPIC)] == [b"one"])


def test_a_deposed_leader_truncates_its_unreplicated_tail(replicas: Replicas) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=1)
    with stubs(replicas[1]) as s:
        assert produce(s, TOPIC, 0, values_batch([b"a", b"b"]), acks=-1).error == 0
        pause(replicas[2])
        pause(replicas[3])
        try:
            # Once the leader drops them from the ISR, no fetch of theirs is in flight
            # (a long poll lasts a third of the lag time at most).
            controller.wait_for_isr(TOPIC, 0, [1])
            # acks=1: stored by the leader alone, never replicated.
            assert produce(s, TOPIC, 0, values_batch([b"lost-1", b"lost-2"]), acks=1).error == 0
            assert _state(replicas[1], TOPIC).log_end_offset == 4
        finally:
            replicas[1].kill()
            resume(replicas[2])
            resume(replicas[3])
    controller.elect(TOPIC, 0, leader=2, isr=[2, 3])
    with stubs(replicas[2]) as s:
        assert produce(s, TOPIC, 0, values_batch([b"c"]), acks=-1).error == 0
    replicas[1].start()
    controller.push()
    assert wait_for(lambda: _state(replicas[1], TOPIC).role == "follower")
    assert wait_for(lambda: _state(replicas[1], TOPIC).log_end_offset == 3, timeout_s=15)
    with stubs(replicas[2]) as s:
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"a", b"b", b"c"]
    controller.wait_for_isr(TOPIC, 0, [1, 2, 3])
    for broker in replicas.brokers.values():
        broker.terminate()
    assert len({_log_bytes(replicas[b], TOPIC, 0, 3) for b in (1, 2, 3)}) == 1


def test_followers_and_offline_partitions_refuse_clients(replicas: Replicas) -> None:
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3])
    with stubs(replicas[2]) as s:
        refused = produce(s, TOPIC, 0, values_batch([b"x"]), acks=1)
        assert refused.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        fetch = broker_pb2.FetchRequest(
            partitions=[broker_pb2.FetchPartition(topic=TOPIC, partition=0, fetch_offset=0)]
        )
        (result,) = s.broker.Fetch(fetch, timeout=10).results
        assert result.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
        offsets = broker_pb2.ListOffsetsRequest(
            partitions=[broker_pb2.ListOffsetsPartition(topic=TOPIC, partition=0, timestamp=-1)]
        )
        (listed,) = s.broker.ListOffsets(offsets, timeout=10).results
        assert listed.error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    state = _state(replicas[2], TOPIC)
    assert (state.role, state.leader_epoch) == ("follower", 1)
    controller.elect(TOPIC, 0, leader=-1)
    with stubs(replicas[1]) as s:
        refused = produce(s, TOPIC, 0, values_batch([b"x"]), acks=1)
        assert refused.error == ErrorCode.LEADER_NOT_AVAILABLE
        response = s.broker.Metadata(broker_pb2.MetadataRequest(topics=[TOPIC]), timeout=10)
        (partition,) = response.topics[0].partitions
        assert (partition.error, partition.leader_id) == (ErrorCode.LEADER_NOT_AVAILABLE, -1)
    assert _state(replicas[1], TOPIC).role == "offline"


def test_a_restarted_leader_keeps_its_unreplicated_tail_invisible(replicas: Replicas) -> None:
    """A leader SIGKILLed with a tail no follower has comes back (the saved push still
    names it) at its checkpointed high watermark, not its recovered log end: readers and
    acks=all retries cannot take that tail for committed."""
    controller = replicas.controller
    controller.create_topic(TOPIC, [1, 2, 3], min_isr=2)
    with stubs(replicas[1]) as s:
        assert produce(s, TOPIC, 0, values_batch([b"a", b"b"]), acks=-1).error == 0
        pause(replicas[2])
        pause(replicas[3])
        try:
            assert produce(s, TOPIC, 0, values_batch([b"tail"]), acks=1).error == 0
            state = _state(replicas[1], TOPIC)
            assert (state.log_end_offset, state.high_watermark) == (3, 2)
            replicas[1].kill()
            replicas[1].start()
            restarted = _state(replicas[1], TOPIC)
            assert restarted.log_end_offset == 3  # the tail is still on disk
            assert restarted.high_watermark <= 2
        finally:
            resume(replicas[2])
            resume(replicas[3])
    # It leads again once the controller's next push confirms it (not from the saved one).
    assert wait_for(lambda: _state(replicas[1], TOPIC).role == "leader")
    with stubs(replicas[1]) as s:
        # Once the followers copy the tail, it is committed like any record.
        assert wait_for(
            lambda: [r.value for r in fetch_records(s, TOPIC)] == [b"a", b"b", b"tail"],
            timeout_s=15,
        )
