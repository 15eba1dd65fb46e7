"""Brokers verifying real issuers' tokens end to end: the local issuer (JWKS and token
endpoint served by the control plane) and Keycloak (a realm of its own, bootstrapped by
``bootstrap_identity``). The control plane's internal client creates the topic through
the broker's Admin service; a tenant's service account, with its client-credentials
token, produces and consumes on it and is refused everything internal."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

import grpc
import pytest
from django.conf import settings as django_settings
from django.core.wsgi import get_wsgi_application
from django.db import connections

from controlplane.accounts import internal, services
from controlplane.accounts.identity import LocalIdentity, get_identity, reset_identity
from controlplane.accounts.keycloak import internal_client_secret
from controlplane.accounts.keycloak_setup import bootstrap_realm
from controlplane.accounts.models import SigningKey
from controlplane.accounts.tokens import InvalidToken
from controlplane.core.actors import Actor
from controlplane.gateway import admin as brokers
from controlplane.gateway.channels import close_channels, open_channel
from controlplane.provisioning.local import LocalProvisioner
from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from dataplane.client import Consumer, Producer
from dataplane.client.auth import ClientCredentials, StaticToken
from dataplane.client.connection import ChannelSecurity
from dataplane.errors import ErrorCode, MeridianError, error_from_rpc
from tests.controlplane.accounts.test_keycloak import _tenant, keycloak, keycloak_realm
from tests.controlplane.api_base import make_tenant
from tests.support.brokers import BrokerProcess
from tests.support.tls import make_tls_files

__all__ = ["keycloak", "keycloak_realm"]  # fixtures this module uses

ACTOR = Actor.system("tests")
RECORDS = 100


def _broker(directory: Path, secret_file: Path) -> BrokerProcess:
    secret_file.write_text(internal.client_secret(internal.BROKER_CLIENT_ID))
    args = [
        "--jwks-url", internal.jwks_url(),
        "--token-issuer", internal.issuer(),
        "--token-url", internal.token_url(),
        "--client-id", internal.BROKER_CLIENT_ID,
        "--client-secret-file", str(secret_file),
    ]  # fmt: skip
    return BrokerProcess(directory, extra_args=args).start()


def _create_topic(broker: BrokerProcess, topic: str) -> None:
    """As the reconciler does: through the control plane's broker channel."""
    with open_channel(broker.address) as channel:
        response = admin_pb2_grpc.AdminStub(channel).CreatePartitions(
            admin_pb2.CreatePartitionsRequest(
                partitions=[
                    admin_pb2.PartitionSpec(
                        topic=topic, partition=0, config=common_pb2.PartitionConfig()
                    )
                ]
            ),
            timeout=15,
        )
    assert [r.error for r in response.results] == [0], response


def _round_trip(broker: BrokerProcess, topic: str, credentials: Any) -> list[bytes]:
    values = [f"r{i}".encode() for i in range(RECORDS)]
    with Producer(broker.address, credentials=credentials) as producer:
        for value in values:
            producer.send(topic, value)
        producer.flush()
    group = topic.split(".")[0] + ".readers"
    with Consumer(
        broker.address, group_id=group, auto_offset_reset="earliest", credentials=credentials
    ) as consumer:
        consumer.subscribe([topic])
        seen: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(seen) < RECORDS and time.monotonic() < deadline:
            seen += [r.value for r in consumer.poll(timeout_ms=200)]
    return seen


def _admin_refusal(broker: BrokerProcess, token: str) -> str:
    with ChannelSecurity.of(StaticToken(token)).channel(broker.address) as channel:
        try:
            admin_pb2_grpc.AdminStub(channel).DescribeState(
                admin_pb2.DescribeStateRequest(), timeout=10
            )
        except grpc.RpcError as exc:
            return error_from_rpc(exc).code_name
    return "NONE"


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def api_url(transactional_db: None) -> Iterator[str]:
    """The control plane's API served over HTTP in a thread (the brokers fetch the JWKS
    and the broker client's token from it)."""
    application = get_wsgi_application()

    def app(environ: Any, start_response: Any) -> Any:
        try:
            return application(environ, start_response)
        finally:
            connections.close_all()  # this thread's: the test database is dropped after

    server = make_server("127.0.0.1", 0, app, handler_class=_QuietHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.fixture
def broker_auth(settings: Any, tmp_path: Path) -> Iterator[None]:
    settings.BROKER_AUTH = True
    settings.INTERNAL_CLIENT_SECRET_FILE = str(tmp_path / "internal-secret")
    yield
    internal.reset_controller_tokens()  # the next test builds one for its own settings


def test_local_issuer_tokens_work_on_brokers(
    api_url: str,
    local_identity: LocalIdentity,
    settings: Any,
    broker_auth: None,
    tmp_path: Path,
) -> None:
    settings.API_BASE_URL = api_url
    tenant = make_tenant("acme-local")
    account, secret = services.create_service_account(tenant, name="app", actor=ACTOR)
    broker = _broker(tmp_path / "broker", tmp_path / "broker-secret")
    try:
        topic = f"{tenant.slug}.orders"
        _create_topic(broker, topic)
        credentials = ClientCredentials(internal.token_url(), account.client_id, secret)
        seen = _round_trip(broker, topic, credentials)
        assert len(seen) == RECORDS
        assert _admin_refusal(broker, credentials.token()) == "CLUSTER_AUTHORIZATION_FAILED"
    finally:
        broker.kill()


def test_pooled_channels_follow_a_new_identity_provider(
    api_url: str,
    local_identity: LocalIdentity,
    settings: Any,
    broker_auth: None,
    tmp_path: Path,
) -> None:
    """A pooled channel carries the token source it was opened with: once the identity
    provider is rebuilt with new keys (the old ones gone from the JWKS), the next call
    to a broker at the same address must carry the new provider's tokens, not be refused
    for an unknown signing key."""
    settings.API_BASE_URL = api_url
    broker = _broker(tmp_path / "broker", tmp_path / "broker-secret")
    try:
        assert brokers.describe_state(broker.address, []) is not None
        old_kid = local_identity.signing_key()[0]
        SigningKey.objects.all().delete()
        reset_identity()
        new_identity = get_identity()
        assert new_identity is not local_identity
        assert new_identity.signing_key()[0] != old_kid
        broker.restart()  # on the same address, remembering no token it verified
        assert brokers.describe_state(broker.address, []) is not None
    finally:
        broker.kill()
        close_channels()


def test_the_local_issuer_gives_internal_clients_the_internal_role(
    db: None, local_identity: LocalIdentity, broker_auth: None
) -> None:
    secret = internal.local_internal_secret()
    token, _ = local_identity.token_for_client(internal.BROKER_CLIENT_ID, secret)
    claims = local_identity.verify(token)
    assert claims["realm_access"]["roles"] == [django_settings.INTERNAL_ROLE]
    assert claims["azp"] == internal.BROKER_CLIENT_ID
    with pytest.raises(InvalidToken):
        local_identity.token_for_client(internal.BROKER_CLIENT_ID, "wrong")
    assert oct(Path(django_settings.INTERNAL_CLIENT_SECRET_FILE).stat().st_mode & 0o777) == "0o600"


def test_keycloak_service_account_produces_and_consumes_on_its_tenants_topic(
    db: None, keycloak: Any, broker_auth: None, tmp_path: Path
) -> None:
    tenant = _tenant("acme")
    account, secret = services.create_service_account(tenant, name="app", actor=ACTOR)
    broker = _broker(tmp_path / "broker", tmp_path / "broker-secret")
    try:
        topic = f"{tenant.slug}.orders"
        _create_topic(broker, topic)  # meridian-controller's client credentials
        credentials = ClientCredentials(internal.token_url(), account.client_id, secret)
        seen = _round_trip(broker, topic, credentials)
        assert sorted(seen) == sorted(f"r{i}".encode() for i in range(RECORDS))
        token = credentials.token()
        assert _admin_refusal(broker, token) == "CLUSTER_AUTHORIZATION_FAILED"
        other = _tenant("globex")
        with (
            Producer(broker.address, credentials=credentials, retries=0) as producer,
            pytest.raises(MeridianError) as raised,
        ):
            producer.send(f"{other.slug}.orders", b"x")
        assert raised.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    finally:
        broker.kill()


def test_bootstrap_gives_the_internal_clients_the_internal_role(
    db: None, keycloak: Any, broker_auth: None
) -> None:
    for client_id in internal.INTERNAL_CLIENT_IDS:
        secret = internal_client_secret(client_id)
        token = ClientCredentials(internal.token_url(), client_id, secret).token()
        claims = get_identity().verify(token)
        assert django_settings.INTERNAL_ROLE in claims["realm_access"]["roles"]
        assert claims["azp"] == client_id


def test_bootstrap_sets_the_internal_clients_secrets_the_settings_name(
    db: None, keycloak: Any, broker_auth: None, settings: Any
) -> None:
    """Brokers and controllers deployed by Terraform read their clients' secrets from a
    Secret the operator wrote (MERIDIAN_BROKER_CLIENT_SECRET, ..._CONTROLLER_...):
    bootstrap_identity gives the realm's clients those secrets, once."""
    generated = {c: internal_client_secret(c) for c in internal.INTERNAL_CLIENT_IDS}
    wanted = {c: f"{c}-{time.time_ns()}" for c in internal.INTERNAL_CLIENT_IDS}
    settings.CONTROLLER_CLIENT_SECRET = wanted[internal.CONTROLLER_CLIENT_ID]
    settings.BROKER_CLIENT_SECRET = wanted[internal.BROKER_CLIENT_ID]
    try:
        done = bootstrap_realm()
        assert sum("its secret set from the settings" in step for step in done) == 2, done
        assert not [step for step in bootstrap_realm() if "secret set" in step]  # once
        for client_id, secret in wanted.items():
            token = ClientCredentials(internal.token_url(), client_id, secret).token()
            claims = get_identity().verify(token)
            assert django_settings.INTERNAL_ROLE in claims["realm_access"]["roles"]
            refused = ClientCredentials(internal.token_url(), client_id, generated[client_id])
            with pytest.raises(MeridianError) as raised:
                refused.token()
            assert raised.value.code == ErrorCode.UNAUTHENTICATED
    finally:  # the realm's other users read the secrets from it: give them theirs back
        settings.CONTROLLER_CLIENT_SECRET = generated[internal.CONTROLLER_CLIENT_ID]
        settings.BROKER_CLIENT_SECRET = generated[internal.BROKER_CLIENT_ID]
        bootstrap_realm()


def test_the_control_plane_reaches_tls_brokers_with_the_configured_ca(
    settings: Any, tmp_path: Path
) -> None:
    files = make_tls_files(tmp_path / "tls")
    broker = BrokerProcess(tmp_path / "broker", extra_args=files.broker_args()).start()
    try:
        settings.BROKER_TLS_CA_FILE = str(files.ca_file)
        with open_channel(broker.address) as channel:
            state = admin_pb2_grpc.AdminStub(channel).DescribeState(
                admin_pb2.DescribeStateRequest(), timeout=10
            )
        assert state.broker_id == 1
    finally:
        broker.kill()


def test_local_brokers_start_with_the_auth_and_tls_settings(
    db: None, local_identity: LocalIdentity, broker_auth: None, settings: Any, tmp_path: Path
) -> None:
    settings.BROKER_TLS_CERT_FILE, settings.BROKER_TLS_KEY_FILE = "/c.pem", "/k.pem"
    settings.BROKER_TLS_CA_FILE = "/ca.pem"
    args = LocalProvisioner(tmp_path / "brokers").security_args()
    flags = dict(zip(args[::2], args[1::2], strict=True))
    assert flags["--jwks-url"] == f"{settings.API_BASE_URL}/api/v1/auth/jwks.json"
    assert flags["--token-issuer"] == settings.LOCAL_ISSUER
    assert flags["--client-id"] == internal.BROKER_CLIENT_ID
    # The Kafka listener exchanges SASL/PLAIN client ids and secrets at the issuer.
    token_url = f"{settings.API_BASE_URL}/api/v1/auth/token"
    assert flags["--sasl-plain-token-url"] == flags["--token-url"] == token_url
    assert (flags["--tls-cert-file"], flags["--tls-ca-file"]) == ("/c.pem", "/ca.pem")
    secret_file = Path(flags["--client-secret-file"])
    assert secret_file.read_text().strip() == internal.local_internal_secret()
    assert secret_file.stat().st_mode & 0o777 == 0o600
    settings.BROKER_AUTH = False
    settings.BROKER_TLS_CERT_FILE = settings.BROKER_TLS_CA_FILE = ""
    assert LocalProvisioner(tmp_path / "brokers").security_args() == []
