"""The gateway against a real broker process: typed calls, and every failure sorted into
unavailable (retry later) or refused (retrying cannot help)."""

from __future__ import annotations

import socket

import pytest

from controlplane.gateway import admin
from controlplane.gateway.admin import DesiredConfig
from controlplane.gateway.errors import BrokerUnavailable, PartitionRejectedError
from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.errors import ErrorCode, MeridianError
from tests.support.brokers import BrokerProcess

CONFIG = DesiredConfig(
    retention_ms=3_600_000, retention_bytes=-1, max_message_bytes=1 << 20, durability="never"
)


def _closed_address() -> str:
    """An address where nothing listens (a port just released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"127.0.0.1:{port}"


def test_ensure_partitions_creates_then_changes_nothing(broker: BrokerProcess) -> None:
    specs = [admin.spec("acme.orders", p, CONFIG) for p in range(2)]

    assert admin.ensure_partitions(broker.address, specs) == {
        ("acme.orders", 0),
        ("acme.orders", 1),
    }
    assert admin.ensure_partitions(broker.address, specs) == set()
    state = admin.describe_state(broker.address, ["acme.orders"])
    assert sorted(p.partition for p in state.partitions) == [0, 1]


def test_a_name_the_broker_refuses_is_a_permanent_refusal(broker: BrokerProcess) -> None:
    name = "acme." + "x" * 199  # over the brokers' 200-character limit

    with pytest.raises(PartitionRejectedError) as refused:
        admin.ensure_partitions(broker.address, [admin.spec(name, 0, CONFIG)])

    assert refused.value.details["address"] == broker.address


def test_a_broker_that_does_not_answer_is_unavailable() -> None:
    with pytest.raises(BrokerUnavailable) as down:
        admin.describe_state(_closed_address())

    assert down.value.address.startswith("127.0.0.1:")


def test_a_broker_without_an_address_is_unavailable() -> None:
    with pytest.raises(BrokerUnavailable):
        admin.delete_partitions("", [("acme.orders", 0)])


def test_update_metadata_gives_each_broker_its_own_typed_failure(broker: BrokerProcess) -> None:
    request = admin_pb2.UpdateMetadataRequest(controller_id="gateway-test", controller_epoch=1)

    outcomes = admin.update_metadata(
        {"refuses": broker.address, "down": _closed_address()}, request, timeout_s=5.0
    )

    refused, down = outcomes["refuses"], outcomes["down"]
    assert isinstance(refused, MeridianError)  # no cluster id: refused for good
    assert (refused.code, refused.retriable) == (ErrorCode.INVALID_REQUEST, False)
    assert isinstance(down, MeridianError)
    assert down.retriable


def test_group_calls_list_and_describe_what_the_broker_coordinates(broker: BrokerProcess) -> None:
    assert admin.list_groups(broker.address) == []
    [missing] = admin.describe_groups(broker.address, ["acme.nobody"])
    assert missing.error == ErrorCode.GROUP_ID_NOT_FOUND

    with pytest.raises(BrokerUnavailable):
        admin.list_groups(_closed_address())
