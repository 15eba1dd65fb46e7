"""Delays, retries and dead letters through the whole platform: real broker processes of
a ``static`` cluster, the controller's tick in this process, a real Celery worker
reconciling topics, real Postgres, and the REST API.

A tenant's first delayed record makes its timer log (the broker's demand, the controller,
the reconciler) and is delivered, a lane record to its lane topic; the API counts, lists
and cancels scheduled records (audited; another tenant's answer as missing ones). A
retry policy made through the API reaches the brokers with the push; a consumer's
retries end in the dead-letter topic, which the API lists, shows and replays to the
original topic, chosen records or a range (audited); another tenant cannot see or replay
them; the CLI (``meridian dlq``, ``retry-policies``) does it too."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from controlplane.controller.controller import Controller
from controlplane.controller.lease import FileLease
from controlplane.core.models import AuditEvent
from controlplane.lanes import services as lane_services
from controlplane.regions import services as regions
from controlplane.tenants.models import Tenant
from controlplane.topics.acls import grant_topic_acl
from controlplane.topics.models import PartitionAssignment, Topic, TopicAcl
from controlplane.topics.services import create_topic
from dataplane.cli import app
from dataplane.client import Consumer, Producer, TopicPartition
from dataplane.delays import DELAYED_FROM, header
from tests.controlplane.api_base import assert_error
from tests.controlplane.conftest import local_identity, token_for
from tests.controlplane.controller.conftest import ADMIN, wait_until
from tests.support.brokers import BrokerProcess, stop_all
from tests.support.controlplane import CeleryWorker, make_tenant, route_tasks_to, unique_queue

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["local_identity"]


@dataclass
class World:
    brokers: list[BrokerProcess]
    tenant: Tenant
    controller: Controller
    client: Any
    stranger: Any
    meridian: Any

    @property
    def bootstrap(self) -> str:
        return ",".join(b.address for b in self.brokers)

    def until(self, future: Future[Any] | Any, timeout_s: float = 40) -> Any:
        """Tick the controller until ``future`` is done (a client waiting on it)."""
        deadline = time.monotonic() + timeout_s
        while not future.done():
            assert time.monotonic() < deadline, "not done in time"
            self.controller.tick()
            time.sleep(0.2)
        return future.result()

    def ready(self, full_name: str) -> None:
        wait_until(lambda: _ready(full_name) and self.controller.tick() is None, 30, full_name)
        self.controller.tick()


def _ready(full_name: str) -> bool:
    return not Topic.objects.filter(full_name=full_name).exclude(status="ready").exists()


def _in_thread(fn: Any, *args: Any, **kwargs: Any) -> Future[Any]:
    done: Future[Any] = Future()

    def run() -> None:
        try:
            done.set_result(fn(*args, **kwargs))
        except BaseException as exc:  # handed to the test
            done.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return done


@pytest.fixture
def world(
    transactional_db: None, tmp_path: Path, client_for: Any, live_server: Any, local_identity: Any
) -> Iterator[World]:
    region = regions.create_region(name="delay-region", actor=ADMIN)
    cluster = regions.create_cluster(
        region, name="near", provisioner="static", broker_count=2, actor=ADMIN
    )
    brokers = [
        BrokerProcess(tmp_path / f"b{i}", broker_id=i, extra_args=["--cluster-id", "near"])
        for i in (1, 2)
    ]
    worker = CeleryWorker(unique_queue(), tmp_path)
    try:
        for broker in brokers:
            broker.start()
            regions.register_broker(cluster, broker_id=broker.broker_id, host="127.0.0.1",
                                    port=broker.port, actor=ADMIN)  # fmt: skip
        controller = Controller(region.name, "c1", FileLease(tmp_path / "lease.lock"))
        with worker, route_tasks_to(worker.queue):
            tenant = make_tenant("acme", region=region)
            make_tenant("globex", region=region)
            client = client_for(roles={"acme": "developer"})
            stranger = client_for(roles={"globex": "tenant-admin"})
            controller.tick()
            create_topic(tenant, name="orders", partitions=2, actor=ADMIN)
            token = token_for(local_identity, roles={"acme": "developer"})

            def meridian(*args: str) -> Any:
                cli = ["--api", live_server.url, "--token", token, *args]
                result = CliRunner().invoke(app, cli)
                assert result.exit_code == 0, result.output
                return result

            world = World(brokers, tenant, controller, client, stranger, meridian)
            world.ready("acme.orders")
            yield world
    finally:
        print(f"===== celery worker log =====\n{worker.log_text()[-6000:]}")
        for broker in brokers:
            print(f"===== {broker!r} =====\n{broker.log_text()[-6000:]}")
        stop_all(brokers)


def test_a_first_delay_makes_the_timer_log_and_the_api_counts_lists_and_cancels(
    world: World,
) -> None:
    with Producer(world.bootstrap, acks="all", max_block_ms=40_000) as producer:
        first = world.until(
            _in_thread(lambda: producer.send("acme.orders", b"soon", deliver_after=1).result(40))
        )
        timer = Topic.objects.get(full_name="__delay.acme")
        assert (timer.name, timer.retention_ms, timer.partitions) == ("__delay", -1, 3)
        world.ready("__delay.acme")
        later = producer.send("acme.orders", b"later", key=b"k", deliver_after=3600).result(20)
    with Consumer(world.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition("acme.orders", first.partition)])
        delivered = wait_until(lambda: consumer.poll(500), 20, "the delayed record")
    assert [(r.value, header(r.headers, DELAYED_FROM)) for r in delivered] == [
        (b"soon", first.delayed_id.encode())
    ]

    # A lane record is scheduled for its lane topic and delivered there, keeping x-lane.
    lane_services.create_lane(world.tenant, name="ppe", actor=ADMIN)
    lane_topic = "acme.orders~ppe"
    with Producer(world.bootstrap, acks="all", max_block_ms=40_000) as producer:
        world.until(_in_thread(lambda: producer.send("acme.orders", b"x", lane="ppe").result(40)))
        world.ready(lane_topic)
        laned = producer.send("acme.orders", b"lane", lane="ppe", deliver_after=1).result(20)
    assert laned.topic == lane_topic
    with Consumer(world.bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(lane_topic, laned.partition)])
        (moved,) = wait_until(
            lambda: [r for r in consumer.poll(500) if r.value == b"lane"], 20, "the lane record"
        )
    assert (header(moved.headers, "x-lane"), header(moved.headers, DELAYED_FROM)) == (
        b"ppe",
        laned.delayed_id.encode(),
    )

    pending = world.client.get("/api/v1/delayed-records/pending").json()
    assert (pending["tenant"], pending["pending_records"], pending["topics"]) == (
        "acme",
        1,
        {"acme.orders": 1},
    )
    assert pending["complete"]
    listed = world.client.get("/api/v1/delayed-records/scheduled?topic=acme.orders").json()
    assert [r["id"] for r in listed["records"]] == [later.delayed_id]
    assert listed["records"][0]["value_text"] == "later"
    stranger = world.stranger.get("/api/v1/delayed-records/scheduled?topic=acme.orders")
    assert (stranger.status_code, stranger.json()["records"]) == (200, [])  # lists nothing
    assert world.stranger.delete(f"/api/v1/delayed-records/{later.delayed_id}").status_code == 404
    cancel = world.client.delete(f"/api/v1/delayed-records/{later.delayed_id}")
    assert cancel.status_code == 200, cancel.content
    assert cancel.json()["deliver_at_ms"] == later.deliver_at
    event = AuditEvent.objects.get(action="delayed_record.cancel")
    assert (event.object_id, event.tenant_slug) == (later.delayed_id, "acme")
    gone = world.client.delete(f"/api/v1/delayed-records/{first.delayed_id}")
    assert gone.status_code == 409
    assert gone.json()["error"]["code"] == "delayed_record_delivered"
    assert world.client.get("/api/v1/delayed-records/pending").json()["pending_records"] == 0
    assert "__delay.acme" not in str(world.client.get("/api/v1/topics").json())


def test_retries_end_in_dead_letters_the_api_lists_shows_and_replays(world: World) -> None:
    made = world.client.post(
        "/api/v1/retry-policies",
        {"group": "billing", "max_attempts": 2, "backoff_initial_ms": 1000},
        format="json",
    )
    assert made.status_code == 201, made.content
    world.ready("acme.billing.retry")
    world.ready("acme.billing.dlq")
    with Producer(world.bootstrap, acks="all") as producer:
        original = producer.send("acme.orders", b"job", key=b"j").result(20)
    consumer = Consumer(world.bootstrap, group_id="acme.billing", auto_offset_reset="earliest",
                        fetch_max_wait_ms=100)  # fmt: skip
    attempts: list[int] = []
    try:
        consumer.subscribe(["acme.orders"])
        assert "acme.billing.retry" in consumer.reading()

        def retry_until_dead() -> None:
            deadline = time.monotonic() + 60
            while len(attempts) < 2 and time.monotonic() < deadline:
                for record in consumer.poll(200):
                    attempts.append(record.attempt)
                    consumer.retry_later(record, 1, reason="still failing")
                consumer.commit()

        world.until(_in_thread(retry_until_dead), 80)
    finally:
        consumer.close()
    assert attempts == [1, 2]

    url = "/api/v1/retry-policies/billing/dead-letters"
    page = wait_until(lambda: world.client.get(url).json()["records"], 30, "the dead letter")
    (letter,) = page
    assert (letter["reason"], letter["origin_topic"], letter["value_text"]) == (
        "2 attempts: still failing",
        "acme.orders",
        "job",
    )
    shown = world.client.get(f"{url}/{letter['partition']}/{letter['offset']}").json()
    assert shown == letter
    assert world.stranger.get(url).status_code == 404
    body = {"records": [{"partition": letter["partition"], "offset": letter["offset"]}]}
    assert world.stranger.post(f"{url}/replay", body, format="json").status_code == 404
    listed = json.loads(world.meridian("dlq", "list", "billing", "--json").stdout)
    assert [r["offset"] for r in listed["records"]] == [letter["offset"]]
    shown_cli = world.meridian(
        "dlq", "show", "billing", *map(str, (letter["partition"], letter["offset"]))
    )
    assert "2 attempts: still failing" in shown_cli.stdout
    assert "acme.billing.dlq" in world.meridian("retry-policies", "list").stdout
    place = f"{letter['partition']}:{letter['offset']}"
    replay = world.meridian("dlq", "replay", "billing", "--record", place, "--json")
    (done,) = json.loads(replay.stdout)["records"]
    assert (done["topic"], done["to_partition"], done["skipped"]) == (
        "acme.orders",
        original.partition,
        "",
    )
    assert AuditEvent.objects.get(action="dead_letter.replay").after["replayed"] == 1
    with Consumer(world.bootstrap, auto_offset_reset="earliest") as reader:
        reader.assign([TopicPartition("acme.orders", original.partition)])
        reader.seek(TopicPartition("acme.orders", original.partition), done["to_offset"])
        (again,) = wait_until(lambda: reader.poll(500), 20, "the replayed record")
    assert (again.value, again.key, again.attempt) == (b"job", b"j", 1)
    assert header(again.headers, "x-replayed-from") == (
        f"acme.billing.dlq:{letter['partition']}:{letter['offset']}".encode()
    )
    # A range replays what it covers (here the one letter, again); bad ones replay nothing.
    span = {"partition": letter["partition"], "from_offset": 0, "to_offset": letter["offset"] + 9}
    ranged = world.client.post(f"{url}/replay", span, format="json")
    assert ranged.status_code == 200, ranged.content
    assert [(r["offset"], r["skipped"]) for r in ranged.json()["records"]] == [
        (letter["offset"], "")
    ]
    for bad in (
        {**span, "to_offset": -1},
        {**span, **body},
        {"partition": letter["partition"], "from_offset": 0},
        {**span, "to_offset": 10_000_000},
    ):
        assert_error(world.client.post(f"{url}/replay", bad, format="json"), 400, "invalid")
    assert AuditEvent.objects.filter(action="dead_letter.replay").count() == 2

    # Retry headers are anyone's to write: a dead letter the group's retries did not write
    # names no origin to replay to, and a topic the acting person may not produce to (its
    # ACL names someone else) is skipped.
    secret = create_topic(world.tenant, name="secret", partitions=1, actor=ADMIN)
    forged_origin = [("x-retry-topic", b"acme.orders"), ("x-retry-partition", b"0")]
    to_secret = [("x-retry-group", b"acme.billing"), ("x-retry-topic", b"acme.secret"),
                 ("x-retry-partition", b"0")]  # fmt: skip
    to_orders = [("x-retry-group", b"acme.billing"), ("x-retry-topic", b"acme.orders"),
                 ("x-retry-partition", b"0")]  # fmt: skip
    with Producer(world.bootstrap, acks="all") as producer:
        forged, secreted, fine = (
            producer.send("acme.billing.dlq", b"x", headers=h, partition=0).result(20).offset
            for h in (forged_origin, to_secret, to_orders)
        )
    grant_topic_acl(secret, principal="someone-else", operations=["produce"], actor=ADMIN)
    body = {"records": [{"partition": 0, "offset": forged}, {"partition": 0, "offset": secreted}]}
    answer = world.client.post(f"{url}/replay", body, format="json").json()
    assert answer["replayed"] == 0
    skipped = [r["skipped"] for r in answer["records"]]
    assert "not written by the retries of acme.billing" in skipped[0]
    assert "may not produce to acme.secret" in skipped[1]
    # A replay cut short (acme.secret has no leader now) is audited with what it did.
    TopicAcl.objects.filter(topic=secret).delete()
    PartitionAssignment.objects.filter(topic=secret).update(leader=None)
    body = {"records": [{"partition": 0, "offset": fine}, {"partition": 0, "offset": secreted}]}
    cut = world.client.post(f"{url}/replay", body, format="json")
    assert cut.status_code == 503, cut.content
    event = AuditEvent.objects.filter(action="dead_letter.replay").latest("pk")
    assert event.after["replayed"] == 1
    assert [r["offset"] for r in event.after["records"]] == [fine]
    assert event.after["stopped"].startswith("stopped after 1 of 2")
