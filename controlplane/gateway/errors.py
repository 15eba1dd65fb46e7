"""How a broker's failure reaches the control plane: two kinds, kept apart because
callers react to them differently.

- ``BrokerUnavailable`` (transient): the broker did not answer (down, unreachable, timed
  out) or answered with a retriable code (``dataplane.errors.is_retriable``). Retrying
  later may work; Celery tasks retry on it.
- ``BrokerRefusedError`` (permanent), and its ``PartitionRejectedError`` for one
  partition: the broker refused with a fatal code (an invalid name or config...).
  Retrying the same request cannot work.
"""

from __future__ import annotations

from collections.abc import Iterable

import grpc

from controlplane.core.errors import DomainError, Unavailable
from dataplane._gen.meridian.v1 import admin_pb2
from dataplane.errors import ErrorCode, error_from_rpc, is_retriable


class BrokerUnavailable(Unavailable):
    """A broker did not answer, or answered with a retriable error; retry later."""

    code = "broker_unavailable"

    def __init__(self, address: str, message: str) -> None:
        super().__init__(f"broker {address or '(no address)'}: {message}", address=address)
        self.address = address


class BrokerRefusedError(DomainError):
    """A broker refused a request with a non-retriable error: retrying cannot help."""

    code = "broker_refused"


class PartitionRejectedError(BrokerRefusedError):
    """A broker refused a partition with a non-retriable error code."""

    code = "partition_rejected"

    def __init__(self, address: str, result: admin_pb2.AdminResult) -> None:
        name = ErrorCode.Name(result.error)
        super().__init__(
            f"{result.topic}-{result.partition} on broker {address}: {name}: "
            f"{result.error_message}",
            address=address,
            topic=result.topic,
            partition=result.partition,
            error=name,
        )
        self.error_code = int(result.error)


def classify(
    address: str, method: str, exc: grpc.RpcError
) -> BrokerUnavailable | BrokerRefusedError:
    """The typed failure of a call to ``Admin.<method>`` that raised ``exc``."""
    error = error_from_rpc(exc)
    if error.retriable:
        return BrokerUnavailable(address, str(error))
    return BrokerRefusedError(
        f"broker {address} refused {method}: {error}",
        address=address,
        method=method,
        error=error.code_name,
    )


def check_results(address: str, results: Iterable[admin_pb2.AdminResult]) -> None:
    """Raise for the first failed result: ``BrokerUnavailable`` when its code is
    retriable, ``PartitionRejectedError`` when it is not."""
    for result in results:
        if result.error == ErrorCode.NONE:
            continue
        if is_retriable(result.error):
            raise BrokerUnavailable(
                address,
                f"{result.topic}-{result.partition}: {ErrorCode.Name(result.error)}: "
                f"{result.error_message}",
            )
        raise PartitionRejectedError(address, result)
