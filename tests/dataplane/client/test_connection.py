"""The connection pool: a dropped channel stays usable by threads still calling on it."""

import grpc
import pytest

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.connection import ConnectionPool
from dataplane.local import free_ports


def test_forget_reopens_and_leaves_the_old_channel_open_until_close():
    address = f"127.0.0.1:{free_ports(1)[0]}"  # nothing listens there
    pool = ConnectionPool(address)
    old = pool.get(address)
    pool.forget(address)
    new = pool.get(address)
    assert new is not old
    with pytest.raises(grpc.RpcError):  # a transport error, not "closed channel"
        old.broker.Metadata(broker_pb2.MetadataRequest(), timeout=0.2)
    pool.close()
    with pytest.raises(ValueError, match="closed channel"):
        old.broker.Metadata(broker_pb2.MetadataRequest(), timeout=0.2)
