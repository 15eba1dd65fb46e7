"""The drain, on an in-memory cluster with the brokers' idempotence rules: order per key,
lanes, and exactly once across failures, a lost producer and a kill between the journal
and the acknowledgement (simulated by closing the agent without draining)."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from databus.agent import Agent
from databus.stream import WriteError, WriteRecord
from databus.upstream import MemoryUpstream
from dataplane.errors import ErrorCode
from dataplane.hashing import partition_for_key
from tests.databus.conftest import config, wait_until


def values(cluster: MemoryUpstream, topic: str) -> list[bytes]:
    return [v for (t, _), log in sorted(cluster.logs.items()) if t == topic for _, v, _ in log]


def drained(agent: Agent) -> bool:
    return all(s.drainer.idle for s in agent.streams.values())


def test_records_land_by_key_in_order(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    for i in range(300):
        agent.write("clicks", [WriteRecord(b"k%d" % (i % 5), b"%d" % i)], None)
    wait_until(lambda: drained(agent))
    for key in range(5):
        partition = partition_for_key(b"k%d" % key, 3)
        seen = [int(v) for k, v, _ in cluster.logs[("acme.clicks", partition)] if k == b"k%d" % key]
        assert seen == [i for i in range(300) if i % 5 == key]
    assert sorted(int(v) for v in values(cluster, "acme.clicks")) == list(range(300))


def test_lanes_route_to_lane_topics_and_keep_the_header(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent(
        clicks={"topic": "acme.clicks", "linger_ms": 1}, ppe={"topic": "acme.clicks", "lane": "ppe"}
    )
    agent.write("clicks", [WriteRecord(None, b"trunk")], None)
    agent.write("clicks", [WriteRecord(None, b"by-write")], "ppe")
    agent.write("clicks", [WriteRecord(None, b"by-header", [("x-lane", b"ppe")])], None)
    agent.write("ppe", [WriteRecord(None, b"by-stream")], None)
    wait_until(lambda: drained(agent))
    assert values(cluster, "acme.clicks") == [b"trunk"]
    assert sorted(values(cluster, "acme.clicks~ppe")) == [b"by-header", b"by-stream", b"by-write"]
    for log in (log for (t, _), log in cluster.logs.items() if t == "acme.clicks~ppe"):
        for _, _, headers in log:
            assert [h for h in headers if h[0] == "x-lane"] == [("x-lane", b"ppe")]


def test_a_kill_between_journal_and_acknowledgement_resends_without_duplicates(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    """Partition 0 takes the chunk, the others fail; the agent then stops without
    draining (its journal says the chunk is in flight). Started again, it resends the
    same batches: the written one is a duplicate, the others land once."""
    agent = make_agent(
        clicks={"topic": "acme.clicks", "linger_ms": 1, "partitioner": "round_robin"}
    )
    for tp in (("acme.clicks", 1), ("acme.clicks", 2)):
        cluster.fail_next[tp] = [ErrorCode.NOT_LEADER_OR_FOLLOWER] * 1000
    agent.write("clicks", [WriteRecord(None, b"%d" % i) for i in range(30)], None)
    wait_until(lambda: cluster.logs[("acme.clicks", 0)], what="partition 0 written")
    assert agent.streams["clicks"].spool.state.pending is not None
    agent.close(0)
    journal = json.loads((agent.data_dir / "streams" / "clicks" / "drain.json").read_bytes())
    assert journal["pending"]["start"] == 0
    assert journal["pending"]["end"] == 30
    cluster.fail_next.clear()
    again = make_agent()
    wait_until(lambda: drained(again))
    got = values(cluster, "acme.clicks")
    assert sorted(int(v) for v in got) == list(range(30))
    assert len(got) == 30


def test_a_forgotten_producer_gets_a_new_id_and_nothing_twice(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent(
        clicks={"topic": "acme.clicks", "linger_ms": 1, "partitioner": "round_robin"}
    )
    agent.write("clicks", [WriteRecord(None, b"a%d" % i) for i in range(6)], None)
    wait_until(lambda: drained(agent))
    first = agent.streams["clicks"].spool.state.producer_id
    cluster.fail_next[("acme.clicks", 2)] = [ErrorCode.UNKNOWN_PRODUCER_ID]
    agent.write("clicks", [WriteRecord(None, b"b%d" % i) for i in range(6)], None)
    wait_until(lambda: drained(agent))
    assert agent.streams["clicks"].spool.state.producer_id != first
    agent.write("clicks", [WriteRecord(None, b"c%d" % i) for i in range(6)], None)
    wait_until(lambda: drained(agent))
    counts = Counter(values(cluster, "acme.clicks"))
    assert set(counts.values()) == {1}
    assert len(counts) == 18


def test_a_live_topic_change_applies_from_the_next_chunk(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    agent.write("clicks", [WriteRecord(b"k", b"before")], None)
    wait_until(lambda: drained(agent))
    stream = agent.streams["clicks"]
    agent.apply(
        config(2, clicks={"topic": "acme.other", "linger_ms": 1, "compression": "zstd"}), {}
    )
    assert agent.streams["clicks"] is stream  # the same stream, not restarted
    agent.write("clicks", [WriteRecord(b"k", b"after")], None)
    wait_until(lambda: drained(agent))
    assert values(cluster, "acme.clicks") == [b"before"]
    assert values(cluster, "acme.other") == [b"after"]


@pytest.mark.parametrize("when_full", ["reject", "block"])
def test_a_full_spool_refuses_and_counts(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream, when_full: str
) -> None:
    cluster.down = True
    agent = make_agent(
        clicks={
            "topic": "acme.clicks",
            "spool_max_bytes": 1024 * 1024,
            "when_full": when_full,
            "block_timeout_ms": 100,
        }
    )
    record = [WriteRecord(None, b"x" * 60_000)]
    accepted = 0
    refusal: WriteError | None = None
    for _ in range(100):
        try:
            agent.write("clicks", record, None)
        except WriteError as err:
            refusal = err
            break
        accepted += 1
    assert refusal is not None
    assert refusal.kind == "spool_full"
    assert 10 <= accepted < 20
    assert agent.stats()["clicks"]["rejected"] == 1
    cluster.down = False
    wait_until(lambda: drained(agent), 20)
    assert len(values(cluster, "acme.clicks")) == accepted
    agent.write("clicks", record, None)  # room again


def test_drop_oldest_makes_room_and_counts_what_it_dropped(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    cluster.down = True
    agent = make_agent(
        clicks={"topic": "acme.clicks", "spool_max_bytes": 1024 * 1024, "when_full": "drop_oldest"}
    )
    for i in range(40):
        agent.write("clicks", [WriteRecord(None, b"%03d" % i + b"x" * 60_000)], None)
    dropped = agent.stats()["clicks"]["dropped"]
    assert dropped > 0
    cluster.down = False
    wait_until(lambda: drained(agent), 20)
    got = sorted(int(v[:3]) for v in values(cluster, "acme.clicks"))
    assert got == list(range(dropped, 40))  # nothing was in flight: the oldest went


def test_a_write_to_an_undeclared_lane_is_refused_at_the_door(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    before = agent.streams["clicks"].spool.end_offset
    with pytest.raises(WriteError) as caught:
        agent.write("clicks", [WriteRecord(None, b"x")], "boe-nobody")
    assert caught.value.kind == "invalid"
    assert "not declared" in caught.value.message
    assert agent.streams["clicks"].spool.end_offset == before


def test_records_for_an_undeclared_lane_go_to_the_dead_letter_file_not_holding_the_stream(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    """A lane the brokers could not answer for at the write (here: declared then, gone
    by the drain) must not hold the stream: its records are kept aside and counted."""
    cluster.topics["acme.clicks~gone"] = 3
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    cluster.down = True
    agent.write("clicks", [WriteRecord(None, b"to-gone")], "gone")
    agent.write("clicks", [WriteRecord(None, b"trunk")], None)
    del cluster.topics["acme.clicks~gone"]
    cluster.down = False
    wait_until(lambda: drained(agent))
    assert values(cluster, "acme.clicks") == [b"trunk"]
    dead = agent.streams["clicks"].spool.directory / "dead-letter.jsonl"
    [entry] = [json.loads(line) for line in dead.read_text().splitlines()]
    assert entry["value_b64"] == "dG8tZ29uZQ=="
    assert "LANE_NOT_FOUND" in entry["reason"]
    assert agent.streams["clicks"].drainer.stats.undeliverable == 1


def test_ack_on_broker_answers_once_the_brokers_have_the_write(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(clicks={"topic": "acme.clicks", "delivery": "ack_on_broker", "linger_ms": 1})
    accepted, delivery, _ = agent.write(
        "clicks", [WriteRecord(b"k", b"v1"), WriteRecord(b"k", b"v2")], None
    )
    assert (accepted, delivery) == (2, "ack_on_broker")
    assert values(cluster, "acme.clicks") == [b"v1", b"v2"]  # already there at the answer
    monkeypatch.setattr("databus.stream.ACK_ON_BROKER_TIMEOUT_S", 0.3)
    cluster.down = True
    with pytest.raises(WriteError) as caught:
        agent.write("clicks", [WriteRecord(b"k", b"v3")], None)
    assert caught.value.kind == "timeout"  # spooled: it goes out once the brokers return
    cluster.down = False
    wait_until(lambda: drained(agent))
    assert values(cluster, "acme.clicks") == [b"v1", b"v2", b"v3"]


def test_an_agent_started_without_the_control_plane_runs_its_last_configuration(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent()
    agent.apply(
        config(7, clicks={"topic": "acme.clicks", "linger_ms": 1}),
        {"clicks": {"max_record_bytes": 500}},
    )
    agent.close(0)
    again = make_agent()  # nothing applied: what it runs comes from its data directory
    assert again.version == 7
    assert again.streams["clicks"].max_record_bytes == 500
    assert again.write("clicks", [WriteRecord(None, b"x")], None)[0] == 1
    saved = again.data_dir / "config.json"
    assert saved.stat().st_mode & 0o777 == 0o600


def test_the_drain_pauses_as_long_as_throttled_brokers_ask(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    cluster.throttle_ms = 300
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    agent.write("clicks", [WriteRecord(None, b"a")], None)
    wait_until(lambda: drained(agent))
    agent.write("clicks", [WriteRecord(None, b"b")], None)
    wait_until(lambda: drained(agent))
    assert agent.stats()["clicks"]["throttled_seconds"] >= 0.6
    assert values(cluster, "acme.clicks") == [b"a", b"b"]


def test_a_stream_removed_from_the_configuration_still_drains_after_a_restart(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    cluster.down = True
    agent = make_agent(
        clicks={"topic": "acme.clicks", "linger_ms": 1}, other={"topic": "acme.other"}
    )
    agent.write("clicks", [WriteRecord(None, b"%d" % i) for i in range(5)], None)
    agent.apply(config(2, other={"topic": "acme.other"}), {})
    with pytest.raises(WriteError) as caught:
        agent.write("clicks", [WriteRecord(None, b"late")], None)
    assert caught.value.kind == "unknown_stream"
    agent.close(0.2)
    cluster.down = False
    again = make_agent()
    wait_until(lambda: len(values(cluster, "acme.clicks")) == 5)
    assert sorted(values(cluster, "acme.clicks")) == [b"%d" % i for i in range(5)]
    wait_until(lambda: "clicks" not in again.stats(), what="the drained stream to close")
    assert list(again.stats()) == ["other"]


def test_batches_never_outgrow_what_the_topic_takes_and_a_big_write_spans_chunks(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent()
    agent.apply(
        config(1, clicks={"topic": "acme.clicks", "lane": "ppe", "linger_ms": 50}),
        {"clicks": {"max_record_bytes": 4000}},
    )
    cluster.topics["acme.clicks~ppe"] = 3
    agent.write("clicks", [WriteRecord(b"k", b"x" * 500) for _ in range(40)], None)
    with pytest.raises(WriteError) as caught:  # fits alone only without the lane header
        agent.write("clicks", [WriteRecord(b"k", b"y" * (4000 - 61 - 40))], None)
    assert caught.value.kind == "too_large"
    wait_until(lambda: drained(agent))
    assert len(values(cluster, "acme.clicks~ppe")) == 40
    assert max(cluster.batch_sizes) <= 4000


def test_a_batch_the_topic_refuses_as_too_large_goes_to_the_dead_letter_file(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    cluster.fail_next[("acme.clicks", partition_for_key(b"big", 3))] = [ErrorCode.MESSAGE_TOO_LARGE]
    agent.write("clicks", [WriteRecord(b"big", b"refused")], None)
    wait_until(lambda: drained(agent))
    agent.write("clicks", [WriteRecord(b"big", b"after")], None)
    wait_until(lambda: drained(agent))
    assert values(cluster, "acme.clicks") == [b"after"]  # the next batch reuses the sequence
    dead = agent.streams["clicks"].spool.directory / "dead-letter.jsonl"
    assert "MESSAGE_TOO_LARGE" in dead.read_text()


def test_the_drain_outlives_an_unexpected_failure(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    real = cluster.produce
    failures = iter([RuntimeError("boom")])

    def flaky(*args: object, **kwargs: object) -> object:
        for error in failures:
            raise error
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(cluster, "produce", flaky)
    agent.write("clicks", [WriteRecord(None, b"x")], None)
    wait_until(lambda: drained(agent))
    assert values(cluster, "acme.clicks") == [b"x"]
    assert "boom" in agent.streams["clicks"].drainer.stats.last_error


def test_a_drain_state_past_the_end_of_a_truncated_spool_starts_again_at_its_end(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream
) -> None:
    """A power loss took the spool's unsynced tail (fsync never) after the drain state
    had moved past it: new writes take those offsets and must still go out."""
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1, "fsync": "never"})
    agent.write("clicks", [WriteRecord(None, b"a")], None)
    wait_until(lambda: drained(agent))
    agent.close(0)
    state_path = agent.data_dir / "streams" / "clicks" / "drain.json"
    state = json.loads(state_path.read_bytes())
    state["committed"] = 50  # as if offsets below 50 had been spooled and drained
    state_path.write_text(json.dumps(state))
    again = make_agent()
    again.write("clicks", [WriteRecord(None, b"b")], None)
    wait_until(lambda: drained(again))
    assert values(cluster, "acme.clicks") == [b"a", b"b"]


def test_a_drain_state_that_cannot_be_saved_sends_nothing_unjournaled(
    make_agent: Callable[..., Agent], cluster: MemoryUpstream, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A failed save of the journal (a full disk) must not let a chunk go out unjournaled:
    the drain takes the state on disk again and retries, and nothing arrives twice."""
    agent = make_agent(clicks={"topic": "acme.clicks", "linger_ms": 1})
    spool = agent.streams["clicks"].spool
    real = spool.save_state
    failures = iter([OSError(28, "No space left on device")] * 3)

    def flaky() -> None:
        for error in failures:
            raise error
        real()

    monkeypatch.setattr(spool, "save_state", flaky)
    real_produce = cluster.produce
    journal = spool.directory / "drain.json"

    def produce(*args: Any, **kwargs: Any) -> Any:
        assert json.loads(journal.read_bytes())["pending"] is not None, "sent unjournaled"
        return real_produce(*args, **kwargs)

    monkeypatch.setattr(cluster, "produce", produce)
    for i in range(20):
        agent.write("clicks", [WriteRecord(b"k", b"%d" % i)], None)
    wait_until(lambda: drained(agent), 20)
    assert values(cluster, "acme.clicks") == [b"%d" % i for i in range(20)]
