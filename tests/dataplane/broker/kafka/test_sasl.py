"""SASL on the Kafka listener, its logic alone: PLAIN's exchange of a service account's
secret for a token (a stand-in exchange function plays the issuer, since the point is
what the broker trusts and for how long), and the mechanisms' message parsing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from dataplane.broker.kafka import sasl
from dataplane.errors import ErrorCode, MeridianError


class Issuer:
    """Answers client-credentials grants: the secrets it accepts now, tokens living
    ``lifetime_s``; ``down`` makes it unreachable."""

    def __init__(self) -> None:
        self.secrets = {"acme--app": "s1"}
        self.asked = 0
        self.down = False
        self.lifetime_s = 300.0

    def __call__(self, url: str, client_id: str, secret: str) -> tuple[str, float]:
        self.asked += 1
        if self.down:
            raise MeridianError(ErrorCode.BROKER_NOT_AVAILABLE, f"cannot reach {url}")
        if self.secrets.get(client_id) != secret:
            raise MeridianError(ErrorCode.UNAUTHENTICATED, "invalid_client")
        return f"token-{self.asked}", self.lifetime_s


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def setup() -> tuple[sasl.PlainExchange, Issuer, Clock]:
    issuer, clock = Issuer(), Clock()
    exchange = sasl.PlainExchange("http://issuer/token", clock=clock, exchange=issuer)
    yield exchange, issuer, clock
    exchange.close()


def token(exchange: sasl.PlainExchange, client: str, secret: str) -> str:
    return asyncio.run(exchange.token(client, secret))


def test_an_accepted_secret_is_trusted_again_only_for_a_short_while(setup) -> None:
    exchange, issuer, clock = setup
    assert token(exchange, "acme--app", "s1") == "token-1"
    clock.now += sasl.PLAIN_RECHECK_S - 1
    assert token(exchange, "acme--app", "s1") == "token-1"  # no round trip
    assert issuer.asked == 1
    clock.now += 1
    assert token(exchange, "acme--app", "s1") == "token-2"  # asked anew
    assert issuer.asked == 2


def test_a_rotated_secret_stops_opening_sessions_once_asked_again(setup) -> None:
    exchange, issuer, clock = setup
    token(exchange, "acme--app", "s1")
    issuer.secrets["acme--app"] = "s2"  # rotated at the control plane
    clock.now += sasl.PLAIN_RECHECK_S
    with pytest.raises(MeridianError) as refused:
        token(exchange, "acme--app", "s1")
    assert refused.value.code == ErrorCode.UNAUTHENTICATED
    issuer.down = True  # a refused secret is not kept for when the issuer is away
    with pytest.raises(MeridianError) as away:
        token(exchange, "acme--app", "s1")
    assert away.value.code == ErrorCode.BROKER_NOT_AVAILABLE
    issuer.down = False
    assert token(exchange, "acme--app", "s2").startswith("token-")


def test_an_unreachable_issuer_lets_an_accepted_secrets_live_token_serve(setup) -> None:
    exchange, issuer, clock = setup
    first = token(exchange, "acme--app", "s1")
    issuer.down = True
    clock.now += sasl.PLAIN_RECHECK_S
    assert token(exchange, "acme--app", "s1") == first
    clock.now = 1000.0 + issuer.lifetime_s - sasl.TOKEN_MARGIN_S  # near its expiry: no more
    with pytest.raises(MeridianError) as away:
        token(exchange, "acme--app", "s1")
    assert away.value.code == ErrorCode.BROKER_NOT_AVAILABLE


def test_another_secret_for_the_same_client_is_asked_for_itself(setup) -> None:
    exchange, issuer, _ = setup
    token(exchange, "acme--app", "s1")
    with pytest.raises(MeridianError) as refused:
        token(exchange, "acme--app", "guess")
    assert refused.value.code == ErrorCode.UNAUTHENTICATED
    assert issuer.asked == 2


def test_exchanges_beyond_the_limit_are_turned_away_at_once() -> None:
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow_issuer(url: str, client_id: str, secret: str) -> tuple[str, float]:
        entered.release()
        release.wait(10)
        return "t", 300.0

    exchange = sasl.PlainExchange("http://issuer/token", exchange=slow_issuer)

    async def attempt() -> list[object]:
        tasks = [
            asyncio.ensure_future(exchange.token(f"acme--c{i}", "x"))
            for i in range(sasl.MAX_CONCURRENT_EXCHANGES)
        ]
        for _ in tasks:
            await asyncio.to_thread(entered.acquire)
        with pytest.raises(MeridianError) as busy:
            await exchange.token("acme--one-more", "x")
        release.set()
        return [busy.value.code, *(await asyncio.gather(*tasks))]

    try:
        code, *tokens = asyncio.run(attempt())
    finally:
        release.set()
        exchange.close()
    assert code == ErrorCode.BROKER_NOT_AVAILABLE
    assert tokens == ["t"] * sasl.MAX_CONCURRENT_EXCHANGES


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (b"\x00acme--app", "authzid"),
        (b"other\x00acme--app\x00s", "another identity"),
        (b"\x00\x00s", "username"),
        (b"\x00acme--app\x00\xff", "UTF-8"),
        (b"\x00a\x00" + b"s" * (sasl.MAX_AUTH_BYTES + 1), "over"),
    ],
)
def test_bad_plain_messages_are_refused(message: bytes, why: str) -> None:
    with pytest.raises(sasl.SaslError, match=why):
        sasl.plain_credentials(message)


def test_oauthbearer_takes_the_token_of_a_well_formed_message() -> None:
    message = b"n,,\x01host=broker\x01auth=Bearer abc.def.ghi\x01\x01"
    assert sasl.oauthbearer_token(message) == "abc.def.ghi"
    with pytest.raises(sasl.SaslError):
        sasl.oauthbearer_token(b"n,,\x01auth=Basic abc\x01\x01")
