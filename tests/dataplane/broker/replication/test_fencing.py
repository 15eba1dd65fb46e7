"""ReplicaFetch against one real broker: fencing by leader epoch, divergence answers,
and the leader-epoch cache across restarts (kept on disk, rebuilt when missing)."""

from __future__ import annotations

from pathlib import Path

import grpc

from dataplane._gen.meridian.v1 import replication_pb2, replication_pb2_grpc
from dataplane.errors import ErrorCode
from dataplane.storage.leader_epoch import CHECKPOINT_FILE
from tests.dataplane.broker.support import produce, stubs, values_batch
from tests.support.brokers import BrokerProcess
from tests.support.replication import TestController

TOPIC = "acme.fenced"


def _replica_fetch(
    broker: BrokerProcess, epoch: int, offset: int, last_epoch: int = -1, replica: int = 2
) -> replication_pb2.ReplicaFetchResult:
    with grpc.insecure_channel(broker.address) as channel:
        stub = replication_pb2_grpc.ReplicationStub(channel)
        request = replication_pb2.ReplicaFetchRequest(
            replica_id=replica,
            max_wait_ms=0,
            partitions=[
                replication_pb2.ReplicaFetchPartition(
                    topic=TOPIC,
                    partition=0,
                    current_leader_epoch=epoch,
                    fetch_offset=offset,
                    last_fetched_epoch=last_epoch,
                )
            ],
        )
        (result,) = stub.ReplicaFetch(request, timeout=10).results
        return result


def _leading_at_epochs_3_and_5(broker: BrokerProcess) -> TestController:
    """Offsets 0-1 written at epoch 3, 2-4 at epoch 5 (replicas 1 and 2, ISR 1 alone)."""
    controller = TestController([broker])
    controller.create_topic(TOPIC, [1], leader_epoch=3)
    with stubs(broker) as s:
        assert produce(s, TOPIC, 0, values_batch([b"a", b"b"]), acks=-1).error == 0
        controller.elect(TOPIC, 0, leader=1)
        controller.elect(TOPIC, 0, leader=1)
        assert produce(s, TOPIC, 0, values_batch([b"c", b"d", b"e"]), acks=-1).error == 0
    return controller


def test_stale_and_future_epochs_are_fenced(broker: BrokerProcess) -> None:
    controller = _leading_at_epochs_3_and_5(broker)
    assert _replica_fetch(broker, 4, 0).error == ErrorCode.FENCED_LEADER_EPOCH
    assert _replica_fetch(broker, 6, 0).error == ErrorCode.UNKNOWN_LEADER_EPOCH
    fresh = _replica_fetch(broker, 5, 0)
    assert (fresh.error, fresh.log_end_offset, fresh.high_watermark) == (0, 5, 5)
    assert fresh.records
    controller.elect(TOPIC, 0, leader=2)  # now a follower of a broker that is not there
    assert _replica_fetch(broker, 6, 0).error == ErrorCode.NOT_LEADER_OR_FOLLOWER
    controller.stop()


def _assert_divergence_answers(broker: BrokerProcess) -> None:
    # A follower that wrote offsets 2-6 at epoch 3 (a deposed leader's tail) must cut
    # back to where epoch 3 ended here: offset 2.
    diverged = _replica_fetch(broker, 5, 7, last_epoch=3)
    assert diverged.error == 0
    assert diverged.HasField("diverging_epoch")
    assert (diverged.diverging_epoch.epoch, diverged.diverging_epoch.end_offset) == (3, 2)
    assert not diverged.records
    # An epoch between known ones ends where the next known one starts.
    between = _replica_fetch(broker, 5, 4, last_epoch=4)
    assert (between.diverging_epoch.epoch, between.diverging_epoch.end_offset) == (3, 2)
    # A follower in step gets records and no divergence.
    in_step = _replica_fetch(broker, 5, 2, last_epoch=3)
    assert not in_step.HasField("diverging_epoch")
    assert in_step.records


def test_divergence_is_answered_from_the_epoch_cache_which_survives_restarts(
    broker: BrokerProcess,
) -> None:
    controller = _leading_at_epochs_3_and_5(broker)
    controller.stop()
    _assert_divergence_answers(broker)
    checkpoint = Path(broker.data_dir) / f"{TOPIC}-0" / CHECKPOINT_FILE
    assert checkpoint.read_text().split("\n")[2:4] == ["3 0", "5 2"]
    broker.restart()  # SIGKILL: an unclean stop
    _assert_divergence_answers(broker)
    broker.terminate()
    checkpoint.unlink()  # rebuilt from the batch headers at the next start
    broker.start()
    _assert_divergence_answers(broker)
    assert checkpoint.read_text().split("\n")[2:4] == ["3 0", "5 2"]
