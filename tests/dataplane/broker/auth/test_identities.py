"""A broker checks every call's token against the live identities of the controller's
last push: a role counts only in a listed tenant with the id the token names, and a
service account's token only while its account is listed. A tenant deleted and
recreated with the same slug (a new id), a tenant that never existed and a deleted
service account are all refused UNAUTHENTICATED, the first two with the same answer."""

from __future__ import annotations

import queue
import time
import uuid
from collections.abc import Iterator

import grpc
import pytest

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, common_pb2
from dataplane.broker.auth.verifier import LEEWAY_S
from dataplane.client import Producer
from dataplane.client.auth import ClientCredentials
from dataplane.errors import ErrorCode
from dataplane.records import build_batch
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer, tenant_id

from .support import caller, outcome, produce_request, refusal

ACCOUNT = str(uuid.uuid4())
RECREATED_ACME = str(uuid.uuid4())  # the id of a new tenant that took the slug "acme"


def _push(
    broker: BrokerProcess,
    issuer: TestIssuer,
    epoch: int,
    revoked: tuple[str, ...] = (),
    **tenants: str,
) -> None:
    """Identities listing ``tenants`` (slug -> id) and the ``revoked`` accounts."""
    listed = [admin_pb2.TenantIdentity(slug=slug, id=ident) for slug, ident in tenants.items()]
    request = admin_pb2.UpdateMetadataRequest(
        controller_id="test",
        controller_epoch=epoch,
        cluster_id="meridian",
        brokers=[common_pb2.BrokerInfo(id=1, host="127.0.0.1", port=broker.port)],
        tenants=listed,
        identities_listed=True,
        revoked_accounts=revoked,
    )
    with caller(broker.address, issuer.internal_token()) as internal:
        internal.admin.UpdateMetadata(request, timeout=10)


@pytest.fixture(scope="module")
def pushed(secured_broker: BrokerProcess, issuer: TestIssuer) -> BrokerProcess:
    """The module's broker, told that acme and beta live with the issuer's ids."""
    _push(secured_broker, issuer, 1, acme=tenant_id("acme"), beta=tenant_id("beta"))
    return secured_broker


def _metadata(broker: BrokerProcess, token: str) -> str:
    with caller(broker.address, token) as c:
        return outcome(c.broker.Metadata, broker_pb2.MetadataRequest(topics=["acme.orders"]))


def _produce(broker: BrokerProcess, token: str) -> str:
    """``appended`` or the error (the call's or the partition's)."""
    with caller(broker.address, token) as c:
        answer = outcome(c.broker.Produce, produce_request("acme.orders", 0, build_batch([b"x"])))
    return answer if answer.startswith("error") or "error:" in answer else "appended"


def test_a_token_of_a_live_tenant_works(pushed: BrokerProcess, issuer: TestIssuer) -> None:
    token = issuer.token(tenants={"acme": "tenant-admin"})
    assert "acme.orders" in _metadata(pushed, token)
    assert _produce(pushed, token) == "appended"


def test_a_token_of_another_tenant_with_the_same_slug_is_refused_as_a_nonexistent_one(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    """The old tenant's token names acme with its old id; once the push lists acme with
    a new id, it is refused exactly as a token for a tenant that never existed."""
    old = issuer.token(tenants={"acme": "tenant-admin"})
    _push(pushed, issuer, 2, acme=RECREATED_ACME, beta=tenant_id("beta"))
    try:
        refused = _metadata(pushed, old)
        assert refused == "error UNAUTHENTICATED: the token names no live tenant"
        assert _produce(pushed, old) == refused
        ghost = issuer.token(tenants={"ghost": "tenant-admin"})
        assert _metadata(pushed, ghost) == refused
        assert _produce(pushed, ghost) == refused
        new = issuer.token(tenants={"acme": "tenant-admin"}, tenant_ids={"acme": RECREATED_ACME})
        assert _produce(pushed, new) == "appended"
    finally:
        _push(pushed, issuer, 3, acme=tenant_id("acme"), beta=tenant_id("beta"))


def test_only_the_live_tenants_roles_of_a_token_count(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    """A role in a live tenant still works; the stale one is simply not held."""
    token = issuer.token(
        tenants={"acme": "developer", "beta": "developer"},
        tenant_ids={"beta": str(uuid.uuid4())},
    )
    assert _produce(pushed, token) == "appended"
    with caller(pushed.address, token) as c:
        response = c.broker.Produce(
            produce_request("beta.secret", 0, build_batch([b"x"])), timeout=10
        )
    assert [r.error for r in response.results] == [ErrorCode.TOPIC_AUTHORIZATION_FAILED]


def test_a_deleted_service_accounts_token_is_refused_at_the_next_push(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    """A new account's token works before any push names it; once the push revokes the
    account, its token is refused."""
    token = issuer.token(tenants={"acme": "developer"}, client_id="acme--app", account_id=ACCOUNT)
    assert _produce(pushed, token) == "appended"
    _push(pushed, issuer, 4, (ACCOUNT,), acme=tenant_id("acme"), beta=tenant_id("beta"))
    try:
        assert _produce(pushed, token) == (
            "error UNAUTHENTICATED: the token's service account no longer exists"
        )
        with caller(pushed.address, token) as c:
            assert refusal(c.broker.Metadata, broker_pb2.MetadataRequest()).code == (
                ErrorCode.UNAUTHENTICATED
            )
    finally:
        _push(pushed, issuer, 5, acme=tenant_id("acme"), beta=tenant_id("beta"))


def test_internal_and_platform_admin_tokens_need_no_tenant(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    admin = issuer.token(realm_roles=["platform-admin"])
    assert "acme.orders" in _metadata(pushed, admin)
    assert "acme.orders" in _metadata(pushed, issuer.internal_token())


class _Stream:
    """A ProduceStream fed one request at a time (the SDK's way: one long-lived stream)."""

    def __init__(self, broker: BrokerProcess, token: str) -> None:
        self._requests: queue.Queue[broker_pb2.ProduceRequest | None] = queue.Queue()
        self._caller = caller(broker.address, token)
        stub = self._caller.__enter__()
        self._responses = stub.broker.ProduceStream(self._feed(), timeout=60)
        self._sent = 0

    def _feed(self) -> Iterator[broker_pb2.ProduceRequest]:
        while (request := self._requests.get()) is not None:
            yield request

    def produce(self) -> str:
        """``appended``, the partition's error, or the stream's end status."""
        self._sent += 1
        request = produce_request("acme.orders", 0, build_batch([b"streamed"]))
        request.correlation_id = self._sent
        self._requests.put(request)
        try:
            response = next(self._responses)
        except grpc.RpcError as exc:
            return f"stream ended: {exc.code().name} {exc.details()}"
        error = response.results[0].error
        return "appended" if error == ErrorCode.NONE else ErrorCode.Name(error)

    def close(self) -> None:
        self._requests.put(None)
        self._caller.__exit__(None, None, None)


def test_an_open_produce_stream_is_ended_once_its_account_is_revoked(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    """Credentials are checked at every request of a stream, not only when it opens."""
    account = str(uuid.uuid4())
    token = issuer.token(tenants={"acme": "developer"}, client_id="acme--s", account_id=account)
    stream = _Stream(pushed, token)
    try:
        assert stream.produce() == "appended"
        _push(pushed, issuer, 6, (account,), acme=tenant_id("acme"), beta=tenant_id("beta"))
        assert stream.produce() == (
            "stream ended: UNAUTHENTICATED the token's service account no longer exists"
        )
    finally:
        stream.close()
        _push(pushed, issuer, 7, acme=tenant_id("acme"), beta=tenant_id("beta"))


def test_an_open_produce_stream_does_not_outlive_its_token(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    stream = _Stream(pushed, issuer.token(tenants={"acme": "developer"}, ttl_s=1))
    try:
        assert stream.produce() == "appended"
        time.sleep(1 + LEEWAY_S + 1)  # expired, past the clock-skew leeway
        ended = stream.produce()
        assert ended.startswith("stream ended: UNAUTHENTICATED"), ended
        assert "expired" in ended
    finally:
        stream.close()


def test_a_producer_rides_through_the_expiry_of_its_tokens(
    pushed: BrokerProcess, issuer: TestIssuer
) -> None:
    """Tokens living 3 s: each time the broker ends the stream, the SDK opens another with
    a fresh token from the issuer; no record fails or is stored twice."""
    issuer.add_client("acme--short", "s3cret", tenants={"acme": "developer"}, ttl_s=3)
    credentials = ClientCredentials(issuer.token_url, "acme--short", "s3cret")
    futures = []
    with Producer(pushed.address, acks="all", credentials=credentials) as producer:
        started = time.monotonic()
        while time.monotonic() - started < 8:
            futures.append(producer.send("acme.audit", value=b"%d" % len(futures)))
            time.sleep(0.05)
        producer.flush()
    offsets = [future.result(timeout=30).offset for future in futures]
    assert len(set(offsets)) == len(offsets) == len(futures)
    assert offsets == sorted(offsets)
