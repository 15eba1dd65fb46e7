"""Idempotent producers: ids, duplicates, sequence gaps, fencing, and state over restarts."""

from __future__ import annotations

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.broker.producers import SNAPSHOT_FILE
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.dataplane.broker.support import create, fetch_records, produce, stubs

TOPIC = "acme.exactly"


def init_producer(s, producer_id=-1, epoch=-1):
    request = broker_pb2.InitProducerIdRequest(producer_id=producer_id, producer_epoch=epoch)
    response = s.broker.InitProducerId(request, timeout=10)
    assert response.error == 0, response
    return response.producer_id, response.producer_epoch


def batch(pid, epoch, seq, values):
    return build_batch(values, producer_id=pid, producer_epoch=epoch, base_sequence=seq)


def test_producer_ids_are_unique_and_an_epoch_bump_keeps_the_id(broker):
    with stubs(broker) as s:
        ids = [init_producer(s) for _ in range(50)]
        assert len({pid for pid, _ in ids}) == 50
        assert {epoch for _, epoch in ids} == {0}
        assert all(pid >> 40 == 1 for pid, _ in ids), "the broker id is in the high bits"
        pid, _ = ids[0]
        assert init_producer(s, pid, 0) == (pid, 1)


def test_a_retried_batch_gets_its_original_offset_and_is_stored_once(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, epoch = init_producer(s)
        first = produce(s, TOPIC, 0, batch(pid, epoch, 0, [b"a", b"b"]))
        second = produce(s, TOPIC, 0, batch(pid, epoch, 2, [b"c"]))
        retry = produce(s, TOPIC, 0, batch(pid, epoch, 0, [b"a", b"b"]))
        assert (first.base_offset, second.base_offset) == (0, 2)
        assert (retry.error, retry.base_offset, retry.duplicate) == (0, 0, True)
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"a", b"b", b"c"]


def test_duplicates_wait_for_a_synced_original_with_durability_always(broker):
    with stubs(broker) as s:
        create(s, "acme.synced", durability="always")
        pid, epoch = init_producer(s)
        assert produce(s, "acme.synced", 0, batch(pid, epoch, 0, [b"a"])).base_offset == 0
        retry = produce(s, "acme.synced", 0, batch(pid, epoch, 0, [b"a"]))
        assert (retry.base_offset, retry.duplicate) == (0, True)
        assert [r.value for r in fetch_records(s, "acme.synced")] == [b"a"]


def test_a_sequence_gap_is_refused(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, epoch = init_producer(s)
        produce(s, TOPIC, 0, batch(pid, epoch, 0, [b"a"]))
        gap = produce(s, TOPIC, 0, batch(pid, epoch, 5, [b"lost?"]))
        assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert "expected 1" in gap.error_message
        assert produce(s, TOPIC, 0, batch(pid, epoch, 1, [b"b"])).base_offset == 1
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"a", b"b"]


def test_a_new_producer_must_start_at_sequence_zero(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, epoch = init_producer(s)
        late = produce(s, TOPIC, 0, batch(pid, epoch, 3, [b"x"]))
        assert late.error == ErrorCode.UNKNOWN_PRODUCER_ID
        assert fetch_records(s, TOPIC) == []


def test_an_older_epoch_is_fenced(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, old = init_producer(s)
        produce(s, TOPIC, 0, batch(pid, old, 0, [b"old"]))
        _, new = init_producer(s, pid, old)
        assert produce(s, TOPIC, 0, batch(pid, new, 0, [b"new"])).base_offset == 1
        zombie = produce(s, TOPIC, 0, batch(pid, old, 1, [b"zombie"]))
        assert zombie.error == ErrorCode.INVALID_PRODUCER_EPOCH
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"old", b"new"]


def test_non_idempotent_batches_skip_every_check(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        for _ in range(2):
            assert produce(s, TOPIC, 0, build_batch([b"same"])).error == 0
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"same", b"same"]


def _history(s, pid, epoch):
    """Writes seq 0..9 in batches of two: offsets 0..9."""
    for seq in range(0, 10, 2):
        result = produce(s, TOPIC, 0, batch(pid, epoch, seq, [f"r{seq}".encode(), b"+"]))
        assert (result.error, result.base_offset) == (0, seq)


def _assert_state_survived(s, pid, epoch):
    retry = produce(s, TOPIC, 0, batch(pid, epoch, 8, [b"r8", b"+"]))
    assert (retry.error, retry.base_offset, retry.duplicate) == (0, 8, True)
    gap = produce(s, TOPIC, 0, batch(pid, epoch, 12, [b"gap"]))
    assert gap.error == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert produce(s, TOPIC, 0, batch(pid, epoch, 10, [b"next"])).base_offset == 10
    assert len(fetch_records(s, TOPIC)) == 11


def test_producer_state_is_rebuilt_from_the_log_after_sigkill(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, epoch = init_producer(s)
        _history(s, pid, epoch)
    broker.restart()  # SIGKILL: no snapshot covers these batches
    with stubs(broker) as s:
        _assert_state_survived(s, pid, epoch)
        assert init_producer(s)[0] != pid, "ids are not handed out twice after a crash"


def test_producer_state_is_restored_from_its_snapshot_after_a_clean_stop(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, epoch = init_producer(s)
        _history(s, pid, epoch)
    broker.restart(clean=True)
    assert (broker.data_dir / f"{TOPIC}-0" / SNAPSHOT_FILE).exists()
    with stubs(broker) as s:
        _assert_state_survived(s, pid, epoch)


def test_pipelined_retries_and_gaps_get_their_own_answers(broker):
    with stubs(broker) as s:
        create(s, TOPIC)
        pid, epoch = init_producer(s)
        sent = [(0, b"a"), (1, b"b"), (0, b"a"), (2, b"c"), (9, b"gap"), (3, b"d"), (3, b"d")]
        requests = [
            broker_pb2.ProduceRequest(
                acks=1,
                partitions=[
                    broker_pb2.PartitionRecords(
                        topic=TOPIC, partition=0, records=batch(pid, epoch, seq, [value])
                    )
                ],
            )
            for seq, value in sent
        ]
        results = [r.results[0] for r in s.broker.ProduceStream(iter(requests), timeout=30)]
        assert [(r.error, r.base_offset, r.duplicate) for r in results] == [
            (0, 0, False),
            (0, 1, False),
            (0, 0, True),
            (0, 2, False),
            (ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1, False),
            (0, 3, False),
            (0, 3, True),
        ]
        assert [r.value for r in fetch_records(s, TOPIC)] == [b"a", b"b", b"c", b"d"]
