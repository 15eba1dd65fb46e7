"""Lanes on the whole platform: routing of lane and trunk records to exactly their
consumers, lane topics made on first use and collected after their TTL, orphans handed
over between trunk and lane groups under load with no record twice and none missing,
hold, propagation across three services, refusals, and a broker killed while a lane
topic is being made."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from dataplane.errors import ErrorCode, MeridianError
from lanes import processing_lane
from tests.integration.lanes.conftest import (
    consumer,
    drain,
    make_lane,
    make_topic,
    producer,
    quiet,
    unique,
    wait_until,
)
from tests.support.demo import Demo


def _values(records: list[Any]) -> list[bytes]:
    return [r.value for r in records]


def _lane_of(record: Any) -> str | None:
    found = [v for k, v in record.headers if k == "x-lane"]
    return found[-1].decode() if found else None


def test_two_testers_lanes_and_the_trunk_each_get_exactly_their_records(demo: Demo) -> None:
    topic = make_topic(demo, unique("orders"))
    alice, bob = unique("alice"), unique("bob")
    for lane in (alice, bob):
        make_lane(demo, lane, orphan_policy="hold")
    sent: dict[str | None, list[bytes]] = {None: [], alice: [], bob: []}
    with producer(demo) as trunk_p, producer(demo, lane=alice) as alice_p:
        started = time.monotonic()
        alice_p.send(topic, b"alice-first", key=b"k").result(timeout=30)
        first_lane_ack_s = time.monotonic() - started
        sent[alice].append(b"alice-first")
        for i in range(60):
            key = f"k{i % 7}".encode()
            trunk_p.send(topic, f"trunk-{i}".encode(), key=key)
            sent[None].append(f"trunk-{i}".encode())
            alice_p.send(topic, f"alice-{i}".encode(), key=key)
            sent[alice].append(f"alice-{i}".encode())
            # A record's own header routes it too.
            trunk_p.send(topic, f"bob-{i}".encode(), key=key, headers=[("x-lane", bob.encode())])
            sent[bob].append(f"bob-{i}".encode())
        trunk_p.flush()
        alice_p.flush()
    print(f"first lane produce acknowledged after {first_lane_ack_s:.2f} s")
    group = unique("billing")
    for lane, expected in sent.items():
        with consumer(demo, group, lane=lane) as c:
            c.subscribe([topic])
            got = drain(c, len(expected)) + quiet(c, 2)
        assert sorted(_values(got)) == sorted(expected), lane
        assert {_lane_of(r) for r in got} == {lane}
        if lane is not None:
            assert {r.topic for r in got} == {f"{topic}~{lane}"}
    status, body = demo.call("GET", f"/lanes/{alice}")
    assert status == 200, body
    assert [t["name"] for t in body["lane_topics"]] == [f"{topic}~{alice}"]
    assert body["lane_topics"][0]["partitions"] == 3  # the trunk's count


def test_a_lane_that_consumes_the_trunk_reads_both(demo: Demo) -> None:
    topic = make_topic(demo, unique("events"), partitions=2)
    lane = unique("carol")
    make_lane(demo, lane, consume_trunk=True, orphan_policy="hold")
    for records_lane in (None, lane):
        with producer(demo, lane=records_lane) as p:
            prefix = "lane" if records_lane else "trunk"
            futures = [p.send(topic, f"{prefix}-{i}".encode()) for i in range(20)]
            for future in futures:
                future.result(timeout=30)
    with consumer(demo, unique("g"), lane=lane) as c:
        c.subscribe([topic])
        got = drain(c, 40) + quiet(c, 1)
    assert Counter(v.decode().split("-")[0] for v in _values(got)) == {"trunk": 20, "lane": 20}


def test_an_undeclared_or_uncovering_lane_is_refused_and_the_trunk_is_untouched(
    demo: Demo,
) -> None:
    topic = make_topic(demo, unique("pay"), partitions=1)
    other = make_topic(demo, unique("other"), partitions=1)
    narrow = unique("narrow")
    make_lane(demo, narrow, all_topics=False, topics=[other])
    for lane in (unique("nobody"), narrow):
        with producer(demo, lane=lane) as p:
            future = p.send(topic, b"lost?")
            with pytest.raises(MeridianError) as refused:
                future.result(timeout=30)
        assert refused.value.code == ErrorCode.LANE_NOT_FOUND, refused.value
        assert lane in str(refused.value)
    with consumer(demo, unique("g")) as c:
        c.subscribe([topic])
        assert quiet(c, 2) == []


def test_a_lane_topic_is_made_on_first_use_and_collected_after_its_ttl(demo: Demo) -> None:
    topic = make_topic(demo, unique("short"), partitions=1)
    lane = unique("brief")
    make_lane(demo, lane, ttl_s=3)
    with producer(demo, lane=lane) as p:
        p.send(topic, b"soon gone").result(timeout=30)
    lane_topic = f"{topic}~{lane}"
    assert demo.call("GET", f"/topics/{lane_topic}")[0] == 200

    def collected() -> bool:
        status, body = demo.call("GET", f"/lanes/{lane}")
        return status == 404 or body["lane_topics"] == []

    wait_until(collected, 60, "the idle lane topic collected")
    wait_until(lambda: demo.call("GET", f"/topics/{lane_topic}")[0] == 404, 60, "topic gone")
    status, events = demo.call(
        "GET", "/audit-events?action=topic.delete&tenant=demo&limit=1000", token=demo.admin_token
    )
    assert status == 200, events
    assert lane_topic in str(events["results"]), events


def test_hold_keeps_a_lanes_records_until_a_lane_consumer_comes(demo: Demo) -> None:
    topic = make_topic(demo, unique("held"), partitions=2)
    lane = unique("holder")
    make_lane(demo, lane, orphan_policy="hold")
    with producer(demo, lane=lane) as p:
        futures = [p.send(topic, f"held-{i}".encode()) for i in range(30)]
        for future in futures:
            future.result(timeout=30)
    group = unique("g")
    with consumer(demo, group) as trunk:
        trunk.subscribe([topic])
        assert quiet(trunk, 3) == []
        with consumer(demo, group, lane=lane) as c:
            c.subscribe([topic])
            got = drain(c, 30) + quiet(c, 1)
        assert sorted(_values(got)) == sorted(f"held-{i}".encode() for i in range(30))
        assert quiet(trunk, 1) == []


class _Load:
    """A producer writing numbered lane records until stopped; what was acknowledged."""

    def __init__(self, demo: Demo, topic: str, lane: str) -> None:
        self.acked: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(demo, topic, lane), daemon=True)

    def _run(self, demo: Demo, topic: str, lane: str) -> None:
        with producer(demo, lane=lane) as p:
            i = 0
            while not self._stop.is_set():
                value = f"r-{i}".encode()
                p.send(topic, value, key=str(i % 11).encode()).result(timeout=60)
                self.acked.append(value)
                i += 1
                time.sleep(0.005)

    def __enter__(self) -> _Load:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(90)


class _Reader:
    """A consumer polling in a thread until stopped, keeping every record it got."""

    def __init__(self, demo: Demo, group: str, topic: str, lane: str | None) -> None:
        self.got: list[Any] = []
        self._stop = threading.Event()
        self._args = (demo, group, topic, lane)
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        demo, group, topic, lane = self._args
        with consumer(demo, group, lane=lane) as c:
            c.subscribe([topic])
            while not self._stop.is_set():
                self.got.extend(c.poll(timeout_ms=200))

    def start(self) -> _Reader:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(60)


def test_orphans_go_to_the_trunk_and_back_under_load_with_none_twice_or_missing(
    demo: Demo,
) -> None:
    topic = make_topic(demo, unique("handover"), partitions=3)
    lane = unique("dave")
    make_lane(demo, lane, orphan_policy="trunk")
    lane_topic = f"{topic}~{lane}"
    group = unique("billing")
    trunk = _Reader(demo, group, topic, None).start()
    with _Load(demo, topic, lane) as load:
        # No lane consumer: the trunk group takes the lane's records.
        wait_until(lambda: any(r.topic == lane_topic for r in trunk.got), 60, "trunk reads")
        handed = len(trunk.got)
        lane_reader = _Reader(demo, group, topic, lane).start()
        wait_until(lambda: len(lane_reader.got) > 50, 60, "the lane group takes over")
        # The lane is live: the trunk group has handed every lane partition over.
        wait_until(lambda: demo.call("GET", f"/lanes/{lane}")[1]["live_topics"], 30, "live")
        settled = len(trunk.got)
        time.sleep(2)
        assert len(trunk.got) == settled, "the trunk group kept reading the live lane"
        lane_reader.stop()
        # The lane consumer left: the trunk group takes the lane's records again.
        wait_until(lambda: len(trunk.got) > settled + 50, 90, "handed back to the trunk")
        time.sleep(1)
    wait_until(lambda: len(trunk.got) + len(lane_reader.got) >= len(load.acked), 60, "drained")
    time.sleep(2)
    trunk.stop()
    assert handed > 0
    consumed = Counter(r.value for r in trunk.got + lane_reader.got if r.topic == lane_topic)
    twice = [v for v, n in consumed.items() if n > 1]
    missing = set(load.acked) - set(consumed)
    assert twice == [], f"{len(twice)} lane records consumed by both groups: {twice[:5]}"
    assert missing == set(), f"{len(missing)} acknowledged lane records never consumed"
    print(f"hand-over under load: {len(load.acked)} lane records, each consumed once")


def test_a_lane_follows_a_record_through_three_services(demo: Demo) -> None:
    first, second, third = (make_topic(demo, unique(n), partitions=1) for n in "xyz")
    lane = unique("chain")
    make_lane(demo, lane, orphan_policy="hold")
    with producer(demo, lane=lane) as p:
        p.send(first, b"hop").result(timeout=30)
    for source, target in ((first, second), (second, third)):
        # A service that knows nothing of lanes: it consumes as its lane's group and
        # produces with a plain producer while processing.
        with consumer(demo, unique("svc"), lane=lane) as c, producer(demo) as p:
            c.subscribe([source])
            (record,) = drain(c, 1)
            with c.processing(record):
                p.send(target, record.value + b"+").result(timeout=30)
            # An explicit lane wins, and a trunk record resets the lane in effect.
            with processing_lane(None):
                p.send(target, b"trunk").result(timeout=30)
    with consumer(demo, unique("end"), lane=lane) as c:
        c.subscribe([third])
        got = drain(c, 1) + quiet(c, 1)
    assert _values(got) == [b"hop++"]
    assert _lane_of(got[0]) == lane
    with consumer(demo, unique("end")) as c:
        c.subscribe([third])
        assert _values(drain(c, 1) + quiet(c, 1)) == [b"trunk"]


def test_refusals_quota_and_isolation(demo: Demo) -> None:
    # Bad names, a trunk name with '~', a topic of another tenant.
    assert demo.call("POST", "/lanes", {"name": "Bad_Name"})[0] == 400
    assert demo.call("POST", "/topics", {"name": "a~b", "partitions": 1})[0] == 400
    status, body = demo.call(
        "POST", "/tenants", {"slug": "rival", "name": "Rival", "home_region": "east"},
        token=demo.admin_token,
    )  # fmt: skip
    assert status == 201, body
    wait_until(
        lambda: demo.call("GET", "/tenants/rival", token=demo.admin_token)[1]["status"] == "ready",
        60,
        "rival ready",
    )
    status, body = demo.call(
        "POST", "/topics", {"tenant": "rival", "name": "secret", "partitions": 1},
        token=demo.admin_token,
    )  # fmt: skip
    assert status == 201, body
    status, body = demo.call(
        "POST", "/lanes", {"tenant": "rival", "name": "hidden"}, token=demo.admin_token
    )
    assert status == 201, body
    status, body = demo.call(
        "POST", "/lanes", {"name": unique("spy"), "all_topics": False, "topics": ["rival.secret"]}
    )
    assert status == 400, body
    assert "topics" in body["error"]["details"], body
    # Answered exactly as a topic of its own that does not exist.
    own = demo.call(
        "POST", "/lanes", {"name": unique("spy"), "all_topics": False, "topics": ["nosuch"]}
    )[1]["error"]["message"]
    assert body["error"]["message"].replace("rival.secret", "X") == own.replace("nosuch", "X")
    missing = demo.call("GET", "/lanes/no-such-lane")
    assert demo.call("GET", "/lanes/hidden") == missing
    assert missing[0] == 404
    assert demo.call("DELETE", "/lanes/hidden") == demo.call("DELETE", "/lanes/no-such-lane")
    assert "hidden" not in [lane["name"] for lane in demo.call("GET", "/lanes")[1]["results"]]
    # max_lanes: one more than the quota is refused, with the quota named.
    used = demo.call("GET", "/lanes")[1]["count"]
    status, body = demo.call("PATCH", "/quotas/demo", {"max_lanes": used}, token=demo.admin_token)
    assert status == 200, body
    try:
        status, body = demo.call("POST", "/lanes", {"name": unique("over")})
        assert status in (400, 409, 429), body
        assert "max_lanes" in str(body), body
    finally:
        demo.call("PATCH", "/quotas/demo", {"max_lanes": 50}, token=demo.admin_token)


def test_a_lane_with_live_consumers_is_deleted_only_by_force_then_refused(demo: Demo) -> None:
    topic = make_topic(demo, unique("live"), partitions=1)
    lane = unique("busy")
    make_lane(demo, lane, orphan_policy="hold")
    with producer(demo, lane=lane) as p:
        p.send(topic, b"one").result(timeout=30)
    with consumer(demo, unique("g"), lane=lane) as c:
        c.subscribe([topic])
        assert len(drain(c, 1)) == 1
        wait_until(lambda: demo.call("GET", f"/lanes/{lane}")[1]["live_topics"], 30, "live")
        status, body = demo.call("DELETE", f"/lanes/{lane}")
        assert status == 409, body
        status, body = demo.call("DELETE", f"/lanes/{lane}?force=true")
        assert status == 204, body
    # The brokers learn of the deletion with the controller's next push (a tick).
    refusal: MeridianError | None = None
    deadline = time.monotonic() + 20
    with producer(demo, lane=lane) as p:
        while refusal is None and time.monotonic() < deadline:
            try:
                p.send(topic, b"after delete").result(timeout=30)
            except MeridianError as error:
                refusal = error
            time.sleep(0.2)
    assert refusal is not None, "a deleted lane still took records"
    assert refusal.code == ErrorCode.LANE_NOT_FOUND, refusal


def test_a_broker_killed_while_a_lane_topic_is_made_loses_no_acknowledged_record(
    demo: Demo,
) -> None:
    topic = make_topic(demo, unique("crash"), partitions=3)
    lane = unique("crash")
    make_lane(demo, lane, orphan_policy="hold")
    brokers = demo.call("GET", "/brokers?region=east", token=demo.admin_token)[1]["results"]
    victim = next(b for b in brokers if b.get("pid"))
    acked: list[bytes] = []
    failed: list[MeridianError] = []
    with producer(demo, lane=lane) as p:
        futures = [p.send(topic, f"c-{i}".encode(), key=str(i).encode()) for i in range(5)]
        os.kill(victim["pid"], signal.SIGKILL)
        futures += [p.send(topic, f"c-{i}".encode(), key=str(i).encode()) for i in range(5, 200)]
        for i, future in enumerate(futures):
            try:
                future.result(timeout=90)
                acked.append(f"c-{i}".encode())
            except MeridianError as error:
                failed.append(error)
    # The producer retries through the broker's death and the leaders' failover.
    assert failed == []
    with consumer(demo, unique("g"), lane=lane) as c:
        c.subscribe([topic])
        got = drain(c, len(acked), timeout_s=90)
    assert set(acked) <= set(_values(got))
