"""Topic ACLs end to end: entries granted through the service reach a real broker with
authentication on (the local issuer's tokens) in a real controller tick, and the broker
narrows what the tenant's developer service accounts may do on the topic."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from controlplane.accounts import internal
from controlplane.accounts.identity import LocalIdentity
from controlplane.accounts.services import create_service_account
from controlplane.controller.controller import Controller
from controlplane.controller.lease import FileLease
from controlplane.controller.push import MetadataPusher
from controlplane.core.actors import Actor
from controlplane.regions import services as regions
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import get_provisioner
from controlplane.topics.acls import grant_topic_acl, revoke_topic_acl
from controlplane.topics.models import Topic, TopicAcl
from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.client import Consumer
from dataplane.client.auth import ClientCredentials, StaticToken
from dataplane.client.connection import ChannelSecurity
from dataplane.errors import ErrorCode, error_from_rpc
from dataplane.records import build_batch
from tests.controlplane.accounts.test_broker_auth import _create_topic, api_url, broker_auth
from tests.controlplane.controller.conftest import add_topic
from tests.support.brokers import BrokerProcess, stop_all
from tests.support.controlplane import make_tenant

__all__ = ["api_url", "broker_auth"]  # fixtures this module uses

ACTOR = Actor.system("tests")
RECORDS = 5


def _broker(directory: Path, cluster: str) -> BrokerProcess:
    """A broker verifying the local issuer's tokens, in cluster ``cluster``."""
    secret_file = directory / "broker-secret"
    directory.mkdir(parents=True, exist_ok=True)
    secret_file.write_text(internal.client_secret(internal.BROKER_CLIENT_ID))
    args = [
        "--cluster-id", cluster,
        "--jwks-url", internal.jwks_url(),
        "--token-issuer", internal.issuer(),
        "--token-url", internal.token_url(),
        "--client-id", internal.BROKER_CLIENT_ID,
        "--client-secret-file", str(secret_file),
    ]  # fmt: skip
    return BrokerProcess(directory / "broker", extra_args=args).start()


def _produce(broker: BrokerProcess, token: str, topic: str) -> str:
    """The error (its name) of producing ``RECORDS`` records as the token's holder."""
    request = broker_pb2.ProduceRequest(
        acks=1,
        partitions=[
            broker_pb2.PartitionRecords(
                topic=topic,
                partition=0,
                records=build_batch([f"r{i}".encode() for i in range(RECORDS)]),
            )
        ],
    )
    with ChannelSecurity.of(StaticToken(token)).channel(broker.address) as channel:
        try:
            response = broker_pb2_grpc.BrokerStub(channel).Produce(request, timeout=10)
        except grpc.RpcError as exc:
            return error_from_rpc(exc).code_name
    (result,) = response.results
    return ErrorCode.Name(result.error)


def _fetch(broker: BrokerProcess, token: str, topic: str) -> tuple[str, int]:
    """The error (its name) and high watermark of fetching the topic from offset 0."""
    request = broker_pb2.FetchRequest(
        max_wait_ms=0,
        max_bytes=1 << 20,
        replica_id=-1,
        partitions=[
            broker_pb2.FetchPartition(
                topic=topic, partition=0, fetch_offset=0, partition_max_bytes=1 << 20
            )
        ],
    )
    with ChannelSecurity.of(StaticToken(token)).channel(broker.address) as channel:
        try:
            response = broker_pb2_grpc.BrokerStub(channel).Fetch(request, timeout=10)
        except grpc.RpcError as exc:
            return error_from_rpc(exc).code_name, -1
    (result,) = response.results
    return ErrorCode.Name(result.error), result.high_watermark if result.records else 0


def _consume(broker: BrokerProcess, credentials: Any, topic: str) -> list[bytes]:
    """What the SDK's consumer reads from the start in a group of the topic's tenant."""
    with Consumer(
        broker.address,
        group_id=topic.split(".")[0] + ".readers",
        auto_offset_reset="earliest",
        credentials=credentials,
    ) as consumer:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < RECORDS and time.monotonic() < deadline:
            seen += [record.value for record in consumer.poll(timeout_ms=200)]
        consumer.commit()
    return seen


@pytest.fixture
def served_topic(
    api_url: str, local_identity: LocalIdentity, settings: Any, broker_auth: None, tmp_path: Path
) -> Iterator[tuple[Topic, BrokerProcess, Controller]]:
    """Topic ``acme.orders`` on a static cluster of one authenticating broker, and the
    controller of its region (not ticked yet)."""
    settings.API_BASE_URL = api_url
    make_tenant("acme")
    region = regions.create_region(name="acl-region", actor=ACTOR)
    cluster: Cluster = regions.create_cluster(
        region, name="far", provisioner="static", broker_count=1, actor=ACTOR
    )
    broker = _broker(tmp_path, cluster.name)
    controller = Controller(
        region.name,
        "c1",
        FileLease(tmp_path / "acl.lock"),
        provisioner_for=get_provisioner,
        pusher=MetadataPusher(timeout_s=5.0),
    )
    try:
        regions.register_broker(
            cluster, broker_id=1, host="127.0.0.1", port=broker.port, actor=ACTOR
        )
        topic = add_topic(cluster, "orders", 1)
        _create_topic(broker, topic.full_name)
        yield topic, broker, controller
    finally:
        controller.close()
        stop_all([broker])


def test_acl_entries_narrow_developer_accounts_on_the_broker_until_revoked(
    served_topic: tuple[Topic, BrokerProcess, Controller],
) -> None:
    topic, broker, controller = served_topic
    tenant = topic.tenant
    reader, reader_secret = create_service_account(tenant, name="reader", actor=ACTOR)
    other, other_secret = create_service_account(tenant, name="other", actor=ACTOR)
    token_url = internal.token_url()
    reader_token = ClientCredentials(token_url, reader.client_id, reader_secret).token()
    other_token = ClientCredentials(token_url, other.client_id, other_secret).token()
    name = topic.full_name
    controller.tick()  # leaders elected and pushed, no entries yet: roles decide
    assert _produce(broker, other_token, name) == "NONE"
    assert _fetch(broker, reader_token, name) == ("NONE", RECORDS)

    grant_topic_acl(topic, principal=reader.client_id, operations=["consume"], actor=ACTOR)
    controller.tick()

    assert _produce(broker, reader_token, name) == "TOPIC_AUTHORIZATION_FAILED"
    assert _fetch(broker, reader_token, name) == ("NONE", RECORDS)
    assert len(_consume(broker, StaticToken(reader_token), name)) == RECORDS  # group and all
    # Listed nowhere, once the topic has an entry: refused both, whatever its role.
    assert _produce(broker, other_token, name) == "TOPIC_AUTHORIZATION_FAILED"
    assert _fetch(broker, other_token, name)[0] == "TOPIC_AUTHORIZATION_FAILED"

    for acl in TopicAcl.objects.filter(topic=topic):
        revoke_topic_acl(acl, actor=ACTOR)
    controller.tick()

    assert _produce(broker, reader_token, name) == "NONE"
    assert _produce(broker, other_token, name) == "NONE"
    assert _fetch(broker, other_token, name) == ("NONE", 3 * RECORDS)
