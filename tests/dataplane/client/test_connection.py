"""The connection pool: a dropped channel stays usable by threads still calling on it,
and its replacement connects afresh."""

from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest

from dataplane._gen.meridian.v1 import broker_pb2
from dataplane.client.connection import MAX_RETIRED, RETIRED_GRACE_S, ConnectionPool
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


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _closed(conn) -> bool:
    try:
        conn.broker.Metadata(broker_pb2.MetadataRequest(), timeout=0.01)
    except ValueError:
        return True
    except grpc.RpcError:
        return False
    return False


def test_dropped_channels_are_closed_after_the_grace_period():
    address = f"127.0.0.1:{free_ports(1)[0]}"
    clock = _Clock()
    with ConnectionPool(address, clock=clock) as pool:
        first = pool.get(address)
        pool.forget(address)
        clock.now += RETIRED_GRACE_S - 1
        second = pool.get(address)
        pool.forget(address)  # sweeps: the first is still within its grace
        assert not _closed(first)
        assert pool.retired_channels == 2
        clock.now += 1
        pool.forget(address)  # nothing to drop, but the first's grace is over
        assert _closed(first)
        assert not _closed(second)
        assert pool.retired_channels == 1


def test_a_client_facing_a_dead_broker_keeps_a_bounded_number_of_channels():
    address = f"127.0.0.1:{free_ports(1)[0]}"
    with ConnectionPool(address, clock=_Clock()) as pool:
        dropped = []
        for _ in range(MAX_RETIRED * 3):
            dropped.append(pool.get(address))
            pool.forget(address)
        assert pool.retired_channels == MAX_RETIRED
        assert all(_closed(conn) for conn in dropped[:-MAX_RETIRED])
        assert not any(_closed(conn) for conn in dropped[-MAX_RETIRED:])
