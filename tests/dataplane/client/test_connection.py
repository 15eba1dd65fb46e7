"""The connection pool: a dropped channel stays usable by threads still calling on it,
and its replacement connects afresh."""

from concurrent.futures import ThreadPoolExecutor

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


def test_a_channel_reopened_after_failures_reaches_a_restarted_server_at_once():
    """A new channel does not inherit the reconnect backoff of the old one's connection
    to a dead process (gRPC's shared subchannel would fail it at once, UNAVAILABLE)."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    request = broker_pb2.MetadataRequest()
    with ConnectionPool(address) as pool:
        for _ in range(4):  # nothing listens yet: the connection backs off, longer each time
            with pytest.raises(grpc.RpcError):
                pool.get(address).broker.Metadata(request, timeout=0.5)
        server = grpc.server(ThreadPoolExecutor(1))
        server.add_insecure_port(address)
        server.start()
        try:
            pool.forget(address)
            with pytest.raises(grpc.RpcError) as raised:
                pool.get(address).broker.Metadata(request, timeout=5)
            assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED  # reached it
        finally:
            server.stop(None)
