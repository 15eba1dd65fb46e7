"""The HTTP and gRPC front ends: writes in every accepted shape, and every kind of bad
input refused with its status, leaving the spool as it was."""

from __future__ import annotations

import base64
import http.client
import json
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from databus import Client, DatabusError
from databus.agent import Agent
from databus.grpc_ingest import create_server
from databus.http_ingest import MAX_BODY_BYTES, IngestServer
from databus.metrics import REGISTRY
from databus.upstream import MemoryUpstream
from tests.databus.conftest import wait_until

TOKEN = "test-ingest-token"


class Front:
    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.http = IngestServer(("127.0.0.1", 0), agent, TOKEN, REGISTRY)
        self.http.start()
        self.grpc, ports = create_server(agent, TOKEN, ["127.0.0.1:0"])
        self.grpc_target = f"127.0.0.1:{ports[0]}"

    def post(
        self,
        path: str,
        body: bytes,
        content_type: str = "application/json",
        token: str | None = TOKEN,
        headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, Any], dict[str, str]]:
        connection = http.client.HTTPConnection(*self.http.server_address[:2], timeout=10)
        sent = {"Content-Type": content_type, **(headers or {})}
        if token is not None:
            sent["Authorization"] = f"Bearer {token}"
        connection.request("POST", path, body, sent)
        response = connection.getresponse()
        raw = response.read()
        connection.close()
        return response.status, json.loads(raw) if raw else {}, dict(response.headers)

    def write(self, records: list[dict[str, Any]], stream: str = "clicks", **kwargs: Any) -> Any:
        return self.post(
            f"/v1/streams/{stream}/records", json.dumps({"records": records}).encode(), **kwargs
        )

    def close(self) -> None:
        self.http.shutdown()
        self.http.server_close()
        self.grpc.stop(0)


@pytest.fixture
def front(make_agent: Callable[..., Agent]) -> Iterator[Front]:
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1, "key_field": "user.id"})
    agent.apply(agent.config, {"clicks": {"max_record_bytes": 2000}})  # type: ignore[arg-type]
    served = Front(agent)
    yield served
    served.close()


def spooled(front: Front) -> int:
    return front.agent.streams["clicks"].spool.end_offset


def test_json_writes_take_every_value_shape(front: Front, cluster: MemoryUpstream) -> None:
    status, body, _ = front.write(
        [
            {"key": "k", "value": {"user": {"id": 42}}, "headers": {"h": "v"}},
            {"value": "plain text"},
            {
                "value_b64": base64.b64encode(b"\x00\xff").decode(),
                "timestamp_ms": 1_700_000_000_000,
            },
            {"key": "tomb", "value": None},
        ]
    )
    assert (status, body) == (200, {"accepted": 4, "delivery": "ack_on_spool", "config_version": 1})
    wait_until(lambda: sum(len(v) for v in cluster.logs.values()) == 4)
    stored = {v: (k, h) for log in cluster.logs.values() for k, v, h in log}
    assert stored[b'{"user":{"id":42}}'] == (b"k", (("h", b"v"),))
    assert b"plain text" in stored
    assert b"\x00\xff" in stored
    assert stored[None][0] == b"tomb"


def test_the_key_field_gives_a_keyless_json_record_its_key(
    front: Front, cluster: MemoryUpstream
) -> None:
    assert front.write([{"value": {"user": {"id": 7}, "n": 1}}])[0] == 200
    wait_until(lambda: sum(len(v) for v in cluster.logs.values()) == 1)
    assert [k for log in cluster.logs.values() for k, _, _ in log] == [b"7"]


def test_a_binary_body_is_one_record(front: Front, cluster: MemoryUpstream) -> None:
    status, _, _ = front.post(
        "/v1/streams/clicks/records?lane=",
        b"\x01\x02",
        "application/octet-stream",
        headers={"X-Databus-Key": "bin"},
    )
    assert status == 200
    wait_until(lambda: sum(len(v) for v in cluster.logs.values()) == 1)
    assert [(k, v) for log in cluster.logs.values() for k, v, _ in log] == [(b"bin", b"\x01\x02")]


@pytest.mark.parametrize(
    ("body", "status", "kind"),
    [
        (b"{not json", 400, "invalid"),
        (b"[" * 100 + b"]" * 100, 400, "invalid"),
        (json.dumps({"records": []}).encode(), 400, "invalid"),
        (json.dumps({"records": [{"value": "a", "colour": 1}]}).encode(), 400, "invalid"),
        (json.dumps({"records": [{"value_b64": "***"}]}).encode(), 400, "invalid"),
        (json.dumps({"records": [{"value": "a"}], "lane": "NOT A LANE"}).encode(), 400, "invalid"),
        (
            json.dumps({"records": [{"value": "a", "headers": {"x-lane": "Bad!"}}]}).encode(),
            400,
            "invalid",
        ),
        (json.dumps({"records": [{"value": "a", "timestamp_ms": "now"}]}).encode(), 400, "invalid"),
        (
            json.dumps({"records": [{"value": "ok"}, {"value": "x" * 3000}]}).encode(),
            413,
            "too_large",
        ),
    ],
)
def test_bad_input_is_refused_and_nothing_is_spooled(
    front: Front, body: bytes, status: int, kind: str
) -> None:
    before = spooled(front)
    got, answer, _ = front.post("/v1/streams/clicks/records", body)
    assert (got, answer["error"]) == (status, kind)
    assert answer["message"]
    assert spooled(front) == before


def test_unknown_stream_wrong_token_and_oversized_body(front: Front) -> None:
    assert front.write([{"value": "a"}], stream="nope")[:2] == (
        404,
        {"error": "unknown_stream", "message": "no stream 'nope' in the configuration"},
    )
    assert front.write([{"value": "a"}], token="wrong")[0] == 401
    assert front.write([{"value": "a"}], token=None)[0] == 401
    connection = http.client.HTTPConnection(*front.http.server_address[:2], timeout=10)
    connection.putrequest("POST", "/v1/streams/clicks/records")
    connection.putheader("Authorization", f"Bearer {TOKEN}")
    connection.putheader("Content-Length", str(MAX_BODY_BYTES + 1))
    connection.endheaders()  # the agent answers before reading such a body
    assert connection.getresponse().status == 413
    connection.close()
    assert spooled(front) == 0


def test_a_full_spool_answers_429_with_retry_after(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    cluster.down = True
    agent = make_agent(
        clicks={"topic": "acme.clicks", "spool_max_bytes": 1024 * 1024, "when_full": "reject"}
    )
    served = Front(agent)
    try:
        record = {"value": "x" * 200_000}
        answers = [served.write([record, record]) for _ in range(3)]
        assert [a[0] for a in answers] == [200, 200, 429]
        _, body, headers = answers[2]
        assert body["error"] == "spool_full"
        assert headers["Retry-After"] == "1"
        assert agent.stats()["clicks"]["rejected"] == 2
        assert agent.stats()["clicks"]["spool_records"] == 4
    finally:
        served.close()


def test_grpc_writes_and_refusals(front: Front, cluster: MemoryUpstream) -> None:
    with Client(front.grpc_target, token=TOKEN) as client:
        result = client.write_many("clicks", [(b"k1", b"v1", {"h": "x"}), b"v2"])
        assert (result.accepted, result.delivery) == (2, "ack_on_spool")
        with pytest.raises(DatabusError) as unknown:
            client.write("nope", b"x")
        assert unknown.value.kind == "unknown_stream"
        with pytest.raises(DatabusError) as large:
            client.write("clicks", b"x" * 5000)
        assert large.value.kind == "too_large"
        with pytest.raises(DatabusError) as lane:
            client.write("clicks", b"x", lane="Not A Lane")
        assert lane.value.kind == "invalid"
    with (
        Client(front.grpc_target, token="wrong") as intruder,
        pytest.raises(DatabusError) as denied,
    ):
        intruder.write("clicks", b"x")
    assert denied.value.kind == "unauthenticated"
    wait_until(lambda: sum(len(v) for v in cluster.logs.values()) == 2)


def test_an_ack_on_broker_write_dropped_to_make_room_answers_undelivered(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    """With ``ack_on_broker`` the application waits for the brokers. A write accepted
    into the spool and then dropped to make room (``drop_oldest``) while the cluster is
    down is answered 502 ``undelivered`` once the drain has moved past it: never 200."""
    cluster.down = True
    agent = make_agent(
        clicks={
            "topic": "acme.clicks",
            "delivery": "ack_on_broker",
            "spool_max_bytes": 1024 * 1024,
            "when_full": "drop_oldest",
            "linger_ms": 1,
        }
    )
    served = Front(agent)
    answers: dict[str, tuple[int, dict[str, Any], dict[str, str]]] = {}

    def write(name: str) -> None:
        answers[name] = served.write([{"value": name * 600_000}])

    try:
        first = threading.Thread(target=write, args=("a",))
        first.start()
        wait_until(lambda: agent.stats()["clicks"]["spool_records"] == 1, 10, "a spooled")
        second = threading.Thread(target=write, args=("b",))
        second.start()
        wait_until(lambda: agent.stats()["clicks"]["dropped"] == 1, 10, "a dropped for b")
        assert answers == {}  # both wait for the brokers
        cluster.down = False
        first.join(30)
        second.join(30)
        assert answers["b"][0] == 200, answers["b"][1]
        status, body, _ = answers["a"]
        assert (status, body["error"]) == (502, "undelivered"), body
        delivered = [v for log in cluster.logs.values() for _, v, _ in log]
        assert delivered == [b"b" * 600_000]
    finally:
        served.close()
