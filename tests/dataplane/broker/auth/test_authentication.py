"""Every call to a broker with authentication on needs a valid token of the issuer."""

from __future__ import annotations

from typing import Any

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc
from dataplane.errors import ErrorCode
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer, hs256_with_public_key, new_key, unsigned

from .support import caller, refusal

ACME_DEV = {"acme": "developer"}


def _unauthenticated(broker: BrokerProcess, token: str | None) -> str:
    with caller(broker.address, token) as c:
        error = refusal(c.broker.Metadata, broker_pb2.MetadataRequest())
    assert error.code == ErrorCode.UNAUTHENTICATED, error
    return error.message


def test_a_valid_token_is_accepted(secured_broker: BrokerProcess, issuer: TestIssuer) -> None:
    with caller(secured_broker.address, issuer.token(tenants=ACME_DEV)) as c:
        response = c.broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
    assert [t.name for t in response.topics] == ["acme.audit", "acme.orders"]


def test_no_token_is_refused(secured_broker: BrokerProcess) -> None:
    assert "no credentials" in _unauthenticated(secured_broker, None)


def test_a_refused_call_carries_the_grpc_status_and_code(secured_broker: BrokerProcess) -> None:
    with caller(secured_broker.address, None) as c, pytest.raises(grpc.RpcError) as raised:
        c.broker.Metadata(broker_pb2.MetadataRequest(), timeout=10)
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED
    trailing = dict(raised.value.trailing_metadata() or ())
    assert trailing["meridian-error"] == "UNAUTHENTICATED"


def test_a_non_bearer_authorization_is_refused(secured_broker: BrokerProcess) -> None:
    with secured_broker.channel() as channel:
        broker = broker_pb2_grpc.BrokerStub(channel)
        with pytest.raises(grpc.RpcError) as raised:
            broker.Metadata(
                broker_pb2.MetadataRequest(), metadata=[("authorization", "Basic dTpw")], timeout=10
            )
    assert raised.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_the_health_service_stays_open(secured_broker: BrokerProcess) -> None:
    with secured_broker.channel() as channel:
        status = health_pb2_grpc.HealthStub(channel).Check(
            health_pb2.HealthCheckRequest(service="meridian.v1.Broker"), timeout=10
        )
    assert status.status == health_pb2.HealthCheckResponse.SERVING


def test_an_expired_token_is_refused(secured_broker: BrokerProcess, issuer: TestIssuer) -> None:
    claims = issuer.claims(tenants=ACME_DEV, ttl_s=-60)
    assert "expired" in _unauthenticated(secured_broker, issuer.sign(claims))


def test_a_token_signed_by_another_key_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    forged = issuer.sign(issuer.claims(tenants=ACME_DEV), key=new_key())
    assert "signature" in _unauthenticated(secured_broker, forged)


def test_a_token_naming_an_unknown_key_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    forged = issuer.sign(issuer.claims(tenants=ACME_DEV), key=new_key(), kid="made-up")
    assert "made-up" in _unauthenticated(secured_broker, forged)


def test_a_token_for_another_audience_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    claims = {**issuer.claims(tenants=ACME_DEV), "aud": "someone-else"}
    assert "audience" in _unauthenticated(secured_broker, issuer.sign(claims))


def test_a_token_of_another_issuer_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    claims = {**issuer.claims(tenants=ACME_DEV), "iss": "https://elsewhere"}
    assert "issuer" in _unauthenticated(secured_broker, issuer.sign(claims))


def test_an_unsigned_token_is_refused(secured_broker: BrokerProcess, issuer: TestIssuer) -> None:
    message = _unauthenticated(secured_broker, unsigned(issuer.claims(tenants=ACME_DEV)))
    assert "'none'" in message


def test_hs256_keyed_with_the_public_key_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer
) -> None:
    token = hs256_with_public_key(issuer, issuer.claims(tenants=ACME_DEV))
    assert "'HS256'" in _unauthenticated(secured_broker, token)


@pytest.mark.parametrize("claim", ["exp", "sub", "aud", "iss", "iat"])
def test_a_token_missing_a_required_claim_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer, claim: str
) -> None:
    claims: dict[str, Any] = issuer.claims(tenants=ACME_DEV)
    del claims[claim]
    _unauthenticated(secured_broker, issuer.sign(claims))


def test_garbage_is_refused(secured_broker: BrokerProcess) -> None:
    _unauthenticated(secured_broker, "not-a-jwt")


@pytest.mark.parametrize(
    ("claim", "value"),
    [
        ("realm_access", ["platform-admin"]),
        ("realm_access", "platform-admin"),
        ("realm_access", {"roles": "platform-admin"}),
        ("realm_access", {"roles": [1, 2]}),
        ("groups", "/tenants/acme/developer"),
        ("groups", [{"path": "/tenants/acme"}]),
        ("preferred_username", ["alice"]),
        ("azp", 42),
        ("client_id", {"id": "acme--app"}),
        ("account_id", 7),
        ("account_id", "not-a-uuid"),
        ("sub", 12345),
        ("exp", "tomorrow"),
    ],
)
def test_a_claim_of_the_wrong_type_is_refused(
    secured_broker: BrokerProcess, issuer: TestIssuer, claim: str, value: Any
) -> None:
    """A misconfigured mapper's token is an authentication failure, not a crash."""
    claims = {**issuer.claims(tenants=ACME_DEV), claim: value}
    _unauthenticated(secured_broker, issuer.sign(claims))
