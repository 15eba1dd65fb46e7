"""Kafka's wire format: frames, the APIs served and the versions of each, and messages.

A Kafka request is a frame: ``int32 size`` then ``size`` bytes holding the request header
(``int16 api_key``, ``int16 api_version``, ``int32 correlation_id``, a nullable
``client_id``, tagged fields from the first flexible version on) and the body; a response
is ``int32 size``, the response header (``correlation_id``, tagged fields when flexible;
never for ApiVersions) and the body. The bodies' layouts are Kafka's message schemas,
version by version, as kafka-python's ``kafka.protocol`` encodes and decodes them; this
module names which APIs and versions the listener serves (``APIS``) and bounds what it
reads.

Untrusted frames: a size below the header's 8 bytes or above the listener's bound, or a
header or body that does not decode, is ``FrameError``: the connection is closed, as
Kafka closes it, without harming the broker or another connection (bytes after a body
that decodes are ignored). An API or version not served is ``UnsupportedApiError`` (answered
UNSUPPORTED_VERSION for ApiVersions, as Kafka does, so a newer client retries an older
version; the connection is closed for any other API).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any

from kafka.protocol.admin import (
    CreateTopicsRequest,
    CreateTopicsResponse,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
    DeleteTopicsRequest,
    DeleteTopicsResponse,
    DescribeConfigsRequest,
    DescribeConfigsResponse,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
    ListGroupsRequest,
    ListGroupsResponse,
)
from kafka.protocol.consumer import (
    FetchRequest,
    FetchResponse,
    HeartbeatRequest,
    HeartbeatResponse,
    JoinGroupRequest,
    JoinGroupResponse,
    LeaveGroupRequest,
    LeaveGroupResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetFetchRequest,
    OffsetFetchResponse,
    SyncGroupRequest,
    SyncGroupResponse,
)
from kafka.protocol.metadata import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    FindCoordinatorRequest,
    FindCoordinatorResponse,
    MetadataRequest,
    MetadataResponse,
)
from kafka.protocol.producer import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    EndTxnRequest,
    EndTxnResponse,
    InitProducerIdRequest,
    InitProducerIdResponse,
    ProduceRequest,
    ProduceResponse,
    TxnOffsetCommitRequest,
    TxnOffsetCommitResponse,
)
from kafka.protocol.sasl import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)

HEADER_PREFIX = struct.Struct(">hhi")  # api_key, api_version, correlation_id
SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Api:
    """One API the listener serves: its request and response messages and the versions."""

    key: int
    name: str
    request: Any
    response: Any
    min_version: int
    max_version: int

    def serves(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


def _api(request: Any, response: Any, low: int, high: int) -> Api:
    return Api(
        int(request.API_KEY), request.name.removesuffix("Request"), request, response, low, high
    )


# The versions: from what Kafka 4's clients require at least (KIP-896) up to the last
# version whose fields Meridian fills faithfully; a later version would need topic ids in
# place of names (Produce 13, Fetch 13), KIP-890's second transaction protocol
# (AddPartitionsToTxn 4+ is Kafka's broker-to-broker batch, EndTxn 5 and TxnOffsetCommit 5
# transaction version 2) or KIP-848's groups.
APIS: dict[int, Api] = {
    api.key: api
    for api in (
        _api(ProduceRequest, ProduceResponse, 3, 9),
        _api(FetchRequest, FetchResponse, 4, 12),
        _api(ListOffsetsRequest, ListOffsetsResponse, 1, 6),
        _api(MetadataRequest, MetadataResponse, 0, 12),
        _api(OffsetCommitRequest, OffsetCommitResponse, 2, 8),
        _api(OffsetFetchRequest, OffsetFetchResponse, 1, 7),
        _api(FindCoordinatorRequest, FindCoordinatorResponse, 0, 4),
        _api(JoinGroupRequest, JoinGroupResponse, 0, 9),
        _api(HeartbeatRequest, HeartbeatResponse, 0, 4),
        _api(LeaveGroupRequest, LeaveGroupResponse, 0, 5),
        _api(SyncGroupRequest, SyncGroupResponse, 0, 5),
        _api(DescribeGroupsRequest, DescribeGroupsResponse, 0, 5),
        _api(ListGroupsRequest, ListGroupsResponse, 0, 4),
        _api(SaslHandshakeRequest, SaslHandshakeResponse, 1, 1),
        _api(ApiVersionsRequest, ApiVersionsResponse, 0, 3),
        _api(CreateTopicsRequest, CreateTopicsResponse, 2, 7),
        _api(DeleteTopicsRequest, DeleteTopicsResponse, 1, 6),
        _api(InitProducerIdRequest, InitProducerIdResponse, 0, 4),
        _api(DescribeConfigsRequest, DescribeConfigsResponse, 1, 4),
        _api(SaslAuthenticateRequest, SaslAuthenticateResponse, 0, 2),
        _api(DeleteGroupsRequest, DeleteGroupsResponse, 0, 2),
        _api(AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, 0, 3),
        _api(AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, 0, 3),
        _api(EndTxnRequest, EndTxnResponse, 0, 3),
        _api(TxnOffsetCommitRequest, TxnOffsetCommitResponse, 0, 3),
    )
}
API_VERSIONS_KEY = int(ApiVersionsRequest.API_KEY)
PRODUCE_KEY = int(ProduceRequest.API_KEY)
FETCH_KEY = int(FetchRequest.API_KEY)
SASL_KEYS = frozenset({int(SaslHandshakeRequest.API_KEY), int(SaslAuthenticateRequest.API_KEY)})


class FrameError(Exception):
    """A frame that is not a well-formed request: the connection is closed."""


class UnsupportedApiError(Exception):
    """A request of an API or version the listener does not serve."""

    def __init__(self, api_key: int, version: int, correlation_id: int) -> None:
        super().__init__(f"API {api_key} version {version} is not served")
        self.api_key = api_key
        self.version = version
        self.correlation_id = correlation_id


@dataclass(frozen=True)
class Request:
    api: Api
    version: int
    correlation_id: int
    client_id: str
    body: Any


def check_size(size: int, max_frame_bytes: int) -> None:
    """A frame's declared size must hold a header and stay within the bound."""
    if size < HEADER_PREFIX.size or size > max_frame_bytes:
        raise FrameError(f"frame size {size} outside [{HEADER_PREFIX.size}, {max_frame_bytes}]")


def decode_request(frame: bytes) -> Request:
    """The request of ``frame`` (the bytes after its size); ``FrameError`` or
    ``UnsupportedApiError`` otherwise."""
    if len(frame) < HEADER_PREFIX.size:
        raise FrameError(f"a {len(frame)}-byte frame holds no request header")
    api_key, version, correlation_id = HEADER_PREFIX.unpack_from(frame)
    api = APIS.get(api_key)
    if api is None or not api.serves(version):
        raise UnsupportedApiError(api_key, version, correlation_id)
    try:
        body = api.request.decode(frame, version=version, header=True)
    except Exception as exc:  # any malformed field: kafka.protocol raises many kinds
        raise FrameError(f"{api.name} v{version} does not decode: {exc!r}") from None
    header = body.header
    return Request(api, version, correlation_id, header.client_id or "", body)


def make(cls: Any, values: dict[str, Any], version: int | None = None) -> Any:
    """A message or struct of ``cls`` from plain values: nested structs and arrays of
    structs may be given as dicts (converted through the schema's data classes)."""
    fields = cls._struct.fields
    converted: dict[str, Any] = {}
    for name, value in values.items():
        field = fields[name]
        if isinstance(value, dict) and field.is_struct():
            value = make(field.data_class, value)
        elif isinstance(value, list) and field.is_struct_array():
            value = [make(field.data_class, v) if isinstance(v, dict) else v for v in value]
        converted[name] = value
    return cls(**converted) if version is None else cls(version=version, **converted)


def encode_response(request: Request, values: dict[str, Any]) -> bytes:
    """The framed response to ``request`` with ``values`` (fields not given take the
    schema's defaults; fields the version lacks are not sent)."""
    response = make(request.api.response, values, request.version)
    response.with_header(correlation_id=request.correlation_id)
    return bytes(response.encode(header=True, framed=True))


def unsupported_versions_response(correlation_id: int, error_code: int) -> bytes:
    """ApiVersions v0 with ``error_code`` and every API's versions: Kafka's answer to an
    ApiVersions version it does not serve, which clients read whatever they sent."""
    values = {"error_code": error_code, "api_keys": api_keys()}
    response = make(ApiVersionsResponse, values, 0)
    response.with_header(correlation_id=correlation_id)
    return bytes(response.encode(header=True, framed=True))


def api_keys() -> list[dict[str, int]]:
    return [
        {"api_key": api.key, "min_version": api.min_version, "max_version": api.max_version}
        for api in sorted(APIS.values(), key=lambda a: a.key)
    ]
