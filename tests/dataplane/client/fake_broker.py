"""An in-process broker with scripted failures, for the producer's error paths.

It serves ``Metadata``, ``InitProducerId``, ``Produce`` and ``ProduceStream`` for a fixed
set of topics, keeps each partition's batches in memory, and checks producer sequences
as the real broker does (the last 5 batches per producer answer duplicates with their
original offset; a gap is ``OUT_OF_ORDER_SEQUENCE_NUMBER``; a new epoch starts at 0).
Failures are scripted:

- ``fail(code, times)``: the next ``times`` partition results carry ``code`` (nothing
  is appended);
- ``lose_responses(times)``: append, then break the stream instead of answering (the
  producer cannot know the batch was stored);
- ``stall``: a set ``threading.Event`` holds every produce until cleared.

Lanes, as the real broker answers them: ``pend_lane_topic(name, partitions)`` makes a
lane topic answer ``LANE_TOPIC_PENDING`` (metadata and produce) until
``create_topic(name)``; ``refuse_lane_topic(name)`` makes it answer ``LANE_NOT_FOUND``.
Metadata of a lane topic carries ``trunk`` and ``consume_trunk`` (``consume_trunk``
set), of a trunk topic its ``orphaned_lane_topics`` (``orphans``).
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict, deque
from collections.abc import Iterator
from concurrent import futures
from typing import Any

import grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc, common_pb2
from dataplane.errors import ErrorCode
from dataplane.records import decode_batch, iter_batches, set_base_offset


class FakeBroker(broker_pb2_grpc.BrokerServicer):
    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.lock = threading.Lock()
        self.logs: dict[tuple[str, int], list[bytes]] = defaultdict(list)
        self.next_offset: dict[tuple[str, int], int] = defaultdict(int)
        self.seen: dict[tuple[int, str, int], deque[tuple[int, int, int]]] = {}
        self.epochs: dict[tuple[int, str, int], int] = {}
        self.script: deque[int] = deque()
        self.lost = 0
        self.attempts = 0  # partition batches received
        self.acks_seen: set[int] = set()
        self.metadata_calls = 0
        self.producer_ids = 0
        self.stall = threading.Event()
        self.pending: dict[str, int] = {}  # lane topics being created, and their partitions
        self.refused: set[str] = set()  # lane topics of undeclared lanes
        self.consume_trunk: set[str] = set()  # lane topics whose lane reads the trunk too
        self.orphans: dict[str, list[str]] = {}  # trunk topic -> orphaned lane topics
        self.lane_metadata_calls: dict[str, int] = defaultdict(int)
        self.server = grpc.server(futures.ThreadPoolExecutor(8))
        broker_pb2_grpc.add_BrokerServicer_to_server(self, self.server)
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(grace=None)

    # -- scripting -----------------------------------------------------------------------
    def fail(self, code: int, times: int = 1) -> None:
        with self.lock:
            self.script.extend([code] * times)

    def lose_responses(self, times: int = 1) -> None:
        with self.lock:
            self.lost += times

    def pend_lane_topic(self, name: str, partitions: int = 1) -> None:
        with self.lock:
            self.pending[name] = partitions

    def create_topic(self, name: str) -> None:
        with self.lock:
            self.topics[name] = self.pending.pop(name)

    def delete_topic(self, name: str) -> None:
        """The topic and everything of it go, producer state included."""
        with self.lock:
            count = self.topics.pop(name)
            for p in range(count):
                self.logs.pop((name, p), None)
                self.next_offset.pop((name, p), None)
            for table in (self.epochs, self.seen):
                for key in [k for k in table if k[1] == name]:
                    del table[key]

    def refuse_lane_topic(self, name: str) -> None:
        with self.lock:
            self.refused.add(name)

    def records(self, topic: str, partition: int = 0) -> list[Any]:
        with self.lock:
            batches = list(self.logs[topic, partition])
        return [r for b in batches for r in decode_batch(b)[1]]

    def values(self, topic: str, partition: int = 0) -> list[bytes | None]:
        with self.lock:
            batches = list(self.logs[topic, partition])
        return [r.value for b in batches for r in decode_batch(b)[1]]

    # -- the service ---------------------------------------------------------------------
    def Metadata(self, request: Any, context: Any) -> broker_pb2.MetadataResponse:  # noqa: N802
        with self.lock:
            self.metadata_calls += 1
        me = common_pb2.BrokerInfo(id=1, host="127.0.0.1", port=self.port)
        with self.lock:
            topics = [
                self._topic_metadata(name, count)
                for name, count in self.topics.items()
                if not request.topics or name in request.topics
            ]
            for name in request.topics:
                if name in self.topics:
                    continue
                self.lane_metadata_calls[name] += 1
                error = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if name in self.refused:
                    error = ErrorCode.LANE_NOT_FOUND
                elif name in self.pending:
                    error = ErrorCode.LANE_TOPIC_PENDING
                topics.append(self._topic_metadata(name, 0, error))
        return broker_pb2.MetadataResponse(
            cluster_id="fake", broker_id=1, brokers=[me], topics=topics
        )

    def _topic_metadata(
        self, name: str, count: int, error: int = ErrorCode.NONE
    ) -> broker_pb2.TopicMetadata:
        trunk, sep, _ = name.partition("~")
        return broker_pb2.TopicMetadata(
            name=name,
            error=error,  # type: ignore[arg-type]
            partitions=[
                broker_pb2.PartitionMetadata(partition=p, leader_id=1) for p in range(count)
            ],
            trunk=trunk if sep else "",
            consume_trunk=name in self.consume_trunk,
            orphaned_lane_topics=self.orphans.get(name, []),
        )

    def InitProducerId(self, request: Any, context: Any) -> Any:  # noqa: N802
        with self.lock:
            if request.producer_id >= 0:
                return broker_pb2.InitProducerIdResponse(
                    producer_id=request.producer_id, producer_epoch=request.producer_epoch + 1
                )
            self.producer_ids += 1
            return broker_pb2.InitProducerIdResponse(
                producer_id=self.producer_ids, producer_epoch=0
            )

    def Produce(self, request: Any, context: Any) -> broker_pb2.ProduceResponse:  # noqa: N802
        response, lose = self._produce(request)
        if lose:
            context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost (scripted)")
        return response

    def ProduceStream(  # noqa: N802
        self, requests: Iterator[Any], context: Any
    ) -> Iterator[broker_pb2.ProduceResponse]:
        for request in requests:
            response, lose = self._produce(request)
            if lose:
                context.abort(grpc.StatusCode.UNAVAILABLE, "connection lost (scripted)")
            yield response

    def _produce(self, request: Any) -> tuple[broker_pb2.ProduceResponse, bool]:
        while self.stall.is_set():
            time.sleep(0.01)
        results = []
        with self.lock:
            self.acks_seen.add(request.acks)
            for part in request.partitions:
                self.attempts += 1
                results.append(self._append(part, request.acks))
            lose = self.lost > 0
            self.lost -= 1 if lose else 0
        response = broker_pb2.ProduceResponse(
            correlation_id=request.correlation_id, results=results
        )
        return response, lose

    def _append(self, part: Any, acks: int) -> broker_pb2.PartitionProduceResult:
        tp = (part.topic, part.partition)
        result = broker_pb2.PartitionProduceResult(topic=part.topic, partition=part.partition)
        if part.topic not in self.topics:
            result.error = (
                ErrorCode.LANE_NOT_FOUND
                if part.topic in self.refused
                else ErrorCode.LANE_TOPIC_PENDING
                if part.topic in self.pending
                else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            )
            result.base_offset = -1
            return result
        if self.script:
            result.error = self.script.popleft()  # type: ignore[assignment]
            result.error_message = "scripted"
            result.base_offset = -1
            return result
        ((_, header),) = list(iter_batches(part.records))
        if header.producer_id >= 0:
            key = (header.producer_id, *tp)
            if key not in self.epochs and header.base_sequence != 0:
                result.error = ErrorCode.UNKNOWN_PRODUCER_ID  # as the broker: state lost
                result.error_message = f"must start at sequence 0, sent {header.base_sequence}"
                result.base_offset = -1
                return result
            if self.epochs.get(key, -1) < header.producer_epoch:  # a new epoch starts at 0
                self.epochs[key] = header.producer_epoch
                self.seen[key] = deque(maxlen=5)
            cached = self.seen[key]
            for first, last, base in cached:
                if (first, last) == (header.base_sequence, header.last_sequence):
                    result.base_offset, result.duplicate = base, True
                    return result
            expected = cached[-1][1] + 1 if cached else 0
            if header.base_sequence != expected:
                result.error = ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
                result.error_message = f"expected {expected}, got {header.base_sequence}"
                return result
            cached.append((header.base_sequence, header.last_sequence, self.next_offset[tp]))
        data = bytearray(part.records)
        set_base_offset(data, 0, self.next_offset[tp])
        self.logs[tp].append(bytes(data))
        result.base_offset = self.next_offset[tp] if acks else -1
        result.log_append_time_ms = -1
        self.next_offset[tp] += header.record_count
        return result


class LaneProxy:
    """A real broker behind a proxy that answers for lanes as a lane-aware broker does,
    for the consumer's lane paths: every call is passed through as bytes, but

    - ``Metadata`` names the proxy as the broker (so every call comes back through it)
      and adds the lane fields: ``trunk`` of a lane topic, ``consume_trunk`` (lane topics
      in ``consume_trunk``), ``orphaned_lane_topics`` of a trunk topic (``orphans``); a
      lane topic in ``pending`` answers ``LANE_TOPIC_PENDING``;
    - ``FindCoordinator`` names the proxy too;
    - ``OffsetFetch`` answers ``HANDOVER_IN_PROGRESS`` for the partitions in ``held``,
      and counts each group's asks for them in ``held_asks``;
    - ``OffsetCommit``s are recorded in ``commits`` (group, topic, partition, offset).
    """

    def __init__(self, upstream: str) -> None:
        from dataplane._gen.meridian.v1 import group_pb2

        self._group_pb2 = group_pb2
        self.upstream = upstream
        self.lock = threading.Lock()
        self.pending: set[str] = set()
        self.consume_trunk: set[str] = set()
        self.orphans: dict[str, list[str]] = {}
        self.unlaned: set[str] = set()  # trunk topics no declared lane covers
        self.held: set[tuple[str, int]] = set()
        self.held_asks: dict[str, int] = defaultdict(int)
        self.commits: list[tuple[str, str, int, int]] = []
        self.metadata_asks: list[tuple[str, ...]] = []
        self._channel = grpc.insecure_channel(upstream)
        self.server = grpc.server(futures.ThreadPoolExecutor(32))
        handlers: dict[str, grpc.RpcMethodHandler] = {}
        for pb2, name in ((broker_pb2, "Broker"), (group_pb2, "GroupCoordinator")):
            service = pb2.DESCRIPTOR.services_by_name[name]
            for method in service.methods:
                path = f"/{service.full_name}/{method.name}"
                handlers[path] = self._handler(path, method)
        self.server.add_generic_rpc_handlers([_Handlers(handlers)])
        self.port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        self.server.stop(grace=None)
        self._channel.close()

    def _handler(self, path: str, method: Any) -> grpc.RpcMethodHandler:
        channel = self._channel
        rewrite = {
            "Metadata": self._metadata,
            "FindCoordinator": self._find_coordinator,
            "OffsetFetch": self._offset_fetch,
        }.get(method.name)
        note = self._offset_commit if method.name == "OffsetCommit" else None

        def meta(context: Any) -> list[tuple[str, str]]:
            return [(k, v) for k, v in context.invocation_metadata() if not k.startswith(":")]

        if method.client_streaming and method.server_streaming:

            def stream_stream(requests: Iterator[bytes], context: Any) -> Iterator[bytes]:
                yield from channel.stream_stream(path)(requests, metadata=meta(context))

            return grpc.stream_stream_rpc_method_handler(stream_stream)
        if method.server_streaming:

            def unary_stream(request: bytes, context: Any) -> Iterator[bytes]:
                yield from channel.unary_stream(path)(request, metadata=meta(context))

            return grpc.unary_stream_rpc_method_handler(unary_stream)
        if method.client_streaming:

            def stream_unary(requests: Iterator[bytes], context: Any) -> bytes:
                return channel.stream_unary(path)(requests, metadata=meta(context))  # type: ignore[no-any-return]

            return grpc.stream_unary_rpc_method_handler(stream_unary)

        def unary_unary(request: bytes, context: Any) -> bytes:
            if note is not None:
                note(request)
            try:
                answer = channel.unary_unary(path)(
                    request, metadata=meta(context), timeout=context.time_remaining()
                )
            except grpc.RpcError as error:
                context.abort(error.code(), error.details())
            return rewrite(request, answer) if rewrite is not None else answer

        return grpc.unary_unary_rpc_method_handler(unary_unary)

    def _metadata(self, request_bytes: bytes, answer: bytes) -> bytes:
        request = broker_pb2.MetadataRequest.FromString(request_bytes)
        response = broker_pb2.MetadataResponse.FromString(answer)
        with self.lock:
            self.metadata_asks.append(tuple(request.topics))
            for broker in response.brokers:
                broker.host, broker.port = "127.0.0.1", self.port
            for topic in response.topics:
                trunk, sep, _ = topic.name.partition("~")
                if sep:
                    topic.trunk = trunk
                    topic.consume_trunk = topic.name in self.consume_trunk
                    if topic.name in self.pending:
                        del topic.partitions[:]
                        topic.error = ErrorCode.LANE_TOPIC_PENDING
                        topic.error_message = "being created"
                else:
                    del topic.orphaned_lane_topics[:]
                    topic.orphaned_lane_topics.extend(self.orphans.get(topic.name, []))
                    topic.lanes_declared = topic.name not in self.unlaned
        return response.SerializeToString()

    def _find_coordinator(self, request_bytes: bytes, answer: bytes) -> bytes:
        response = self._group_pb2.FindCoordinatorResponse.FromString(answer)
        if response.coordinator.port:
            response.coordinator.host, response.coordinator.port = "127.0.0.1", self.port
        return response.SerializeToString()

    def _offset_fetch(self, request_bytes: bytes, answer: bytes) -> bytes:
        request = self._group_pb2.OffsetFetchRequest.FromString(request_bytes)
        response = self._group_pb2.OffsetFetchResponse.FromString(answer)
        with self.lock:
            for result in response.results:
                if (result.topic, result.partition) in self.held:
                    self.held_asks[request.group_id] += 1
                    result.offset = -1
                    result.error = ErrorCode.HANDOVER_IN_PROGRESS
                    result.error_message = "the family's other group holds it"
        return response.SerializeToString()

    def _offset_commit(self, request_bytes: bytes) -> None:
        request = self._group_pb2.OffsetCommitRequest.FromString(request_bytes)
        with self.lock:
            for item in request.partitions:
                self.commits.append((request.group_id, item.topic, item.partition, item.offset))


class _Handlers(grpc.GenericRpcHandler):  # type: ignore[misc]
    def __init__(self, handlers: dict[str, grpc.RpcMethodHandler]) -> None:
        self._handlers = handlers

    def service(self, handler_call_details: Any) -> grpc.RpcMethodHandler | None:
        return self._handlers.get(handler_call_details.method)
