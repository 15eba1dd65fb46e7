"""``ClusterView.brokers``: which address each broker is advertised with, merging the
controller's push with what the peers themselves answer."""

from __future__ import annotations

from pathlib import Path

from dataplane._gen.meridian.v1 import admin_pb2, common_pb2
from dataplane.broker.cluster import ClusterView
from dataplane.broker.config import BrokerConfig


def _view(tmp_path: Path) -> ClusterView:
    config = BrokerConfig(broker_id=1, data_dir=tmp_path, peers={2: "127.0.0.1:9002"})
    view = ClusterView(config, lambda: [], 9001)
    view.me.kafka_port = 19001
    return view


def _push(view: ClusterView, *brokers: common_pb2.BrokerInfo) -> None:
    view.pushed.current = admin_pb2.UpdateMetadataRequest(
        controller_epoch=1, cluster_id="meridian", brokers=brokers
    )


def test_a_pushed_broker_without_a_kafka_port_takes_the_one_it_reported(tmp_path: Path) -> None:
    view = _view(tmp_path)
    view.peers[2].info = common_pb2.BrokerInfo(id=2, host="127.0.0.1", port=9002, kafka_port=19002)
    _push(view, common_pb2.BrokerInfo(id=2, host="127.0.0.1", port=9002, rack="r2"))
    me, peer = view.brokers()
    assert (me.id, me.kafka_port) == (1, 19001)
    assert (peer.id, peer.port, peer.kafka_port, peer.rack) == (2, 9002, 19002, "r2")
    assert view.pushed.brokers()[0].kafka_port == 0, "the push itself is left as it came"


def test_the_pushed_kafka_port_wins_and_another_address_is_not_merged(tmp_path: Path) -> None:
    view = _view(tmp_path)
    view.peers[2].info = common_pb2.BrokerInfo(id=2, host="127.0.0.1", port=9002, kafka_port=19002)
    _push(view, common_pb2.BrokerInfo(id=2, host="127.0.0.1", port=9002, kafka_port=29002))
    assert view.brokers()[1].kafka_port == 29002
    _push(view, common_pb2.BrokerInfo(id=2, host="10.0.0.2", port=9002))
    assert view.brokers()[1].kafka_port == 0
