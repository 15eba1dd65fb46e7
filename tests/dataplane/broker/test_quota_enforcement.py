"""Tenant quotas enforced by a real broker process, from pushes sent by the test: held
responses with ``throttle_ms``, other tenants untouched, storage refusals, internal calls
never throttled, new pushes applied, the persisted push applied after a restart.

Holds are checked from below only (a held response cannot come back before its hold),
never against an upper time bound."""

from __future__ import annotations

import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, group_pb2, group_pb2_grpc
from dataplane.errors import ErrorCode
from tests.dataplane.broker.auth.support import caller, create_topic, outcome
from tests.dataplane.broker.support import (
    TIMEOUT_S,
    create,
    end_offset,
    fetch_records,
    produce,
    stubs,
    values_batch,
)
from tests.support.brokers import BrokerProcess
from tests.support.issuer import TestIssuer

KIB = 1024


class Pusher:
    """Sends pushes with a growing controller epoch, as one controller would."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.broker = broker
        self.epoch = 0

    def __call__(self, *quotas: admin_pb2.TenantQuota) -> None:
        self.epoch += 1
        request = admin_pb2.UpdateMetadataRequest(
            controller_id="test", controller_epoch=self.epoch, cluster_id="meridian", quotas=quotas
        )
        with stubs(self.broker) as s:
            s.admin.UpdateMetadata(request, timeout=TIMEOUT_S)


def batch_of(size_bytes: int) -> bytes:
    return values_batch([b"v" * 1000] * max(1, size_bytes // 1000))


def timed(call: Any, *args: Any) -> tuple[Any, float]:
    started = time.monotonic()
    result = call(*args)
    return result, time.monotonic() - started


def produce_request(topic: str, records: bytes, correlation_id: int = 0) -> Any:
    return broker_pb2.ProduceRequest(
        acks=1,
        correlation_id=correlation_id,
        partitions=[broker_pb2.PartitionRecords(topic=topic, partition=0, records=records)],
    )


def scrape(broker: BrokerProcess, name: str, **labels: str) -> float:
    """The sum of ``name``'s samples on the broker's metrics endpoint matching ``labels``."""
    text = urllib.request.urlopen(broker.metrics_url, timeout=TIMEOUT_S).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + "{") and all(f'{k}="{v}"' in line for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_produce_over_quota_is_held_for_its_throttle_time_and_others_are_not(
    broker: BrokerProcess,
) -> None:
    push = Pusher(broker)
    push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=100 * KIB))
    with stubs(broker) as s:
        create(s, "acme.orders")
        create(s, "globex.orders")
        small, big = batch_of(90 * KIB), batch_of(800 * KIB)
        first = s.broker.Produce(produce_request("acme.orders", small), timeout=30)
        assert first.throttle_ms == 0  # within the one-second burst
        # About 7 s owed at 100 KiB/s after the big batch: its response is held that long.
        owed_s = (len(small) + len(big) - 100 * KIB) / (100 * KIB)
        with ThreadPoolExecutor(1) as pool:
            held = pool.submit(timed, s.broker.Produce, produce_request("acme.orders", big), 30)
            other = s.broker.Produce(
                produce_request("globex.orders", batch_of(800 * KIB)), timeout=30
            )
            assert not held.done(), "another tenant's call waited for the throttled one"
            assert other.throttle_ms == 0
            assert other.results[0].error == 0
            response, elapsed_s = held.result()
    assert response.results[0].error == 0  # held, not refused: nothing is dropped
    # Less only by what the bucket refilled between the two calls (well under 2 s).
    assert owed_s * 1000 - 2000 <= response.throttle_ms <= owed_s * 1000 + 1
    assert elapsed_s >= response.throttle_ms / 1000 * 0.95
    assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="acme") == 1
    assert scrape(broker, "meridian_broker_throttle_seconds_total", tenant="acme") >= 6
    assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="globex") == 0


def test_a_produce_stream_holds_each_response_in_turn_and_keeps_their_order(
    broker: BrokerProcess,
) -> None:
    push = Pusher(broker)
    push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=200 * KIB))
    with stubs(broker) as s:
        create(s, "acme.stream")
        records = batch_of(150 * KIB)
        requests = [produce_request("acme.stream", records, correlation_id=i) for i in range(1, 6)]
        started = time.monotonic()
        responses = list(s.broker.ProduceStream(iter(requests), timeout=60))
        elapsed_s = time.monotonic() - started
        assert end_offset(s, "acme.stream") == 5 * (150 * KIB // 1000)
    assert [r.correlation_id for r in responses] == [1, 2, 3, 4, 5]
    assert all(r.results[0].error == 0 for r in responses)
    throttles = [r.throttle_ms for r in responses]
    assert throttles[0] == 0  # the burst absorbs the first
    assert all(t > 0 for t in throttles[1:])
    # Five batches at 200 KiB/s with one second of burst cannot all be answered sooner.
    owed_s = (5 * len(records) - 200 * KIB) / (200 * KIB)
    assert elapsed_s >= owed_s * 0.95


def test_fetch_over_quota_is_held_and_says_so(broker: BrokerProcess) -> None:
    push = Pusher(broker)
    with stubs(broker) as s:
        create(s, "acme.read")
        for _ in range(3):
            assert produce(s, "acme.read", 0, batch_of(100 * KIB)).error == 0
        push(admin_pb2.TenantQuota(tenant="acme", fetch_bytes_per_s=100 * KIB))
        request = broker_pb2.FetchRequest(
            max_wait_ms=0,
            partitions=[
                broker_pb2.FetchPartition(
                    topic="acme.read", partition=0, fetch_offset=0, partition_max_bytes=4 * 2**20
                )
            ],
        )
        response, elapsed_s = timed(s.broker.Fetch, request)
    fetched = len(response.results[0].records)
    assert fetched > 290 * KIB
    owed_ms = (fetched - 100 * KIB) / (100 * KIB) * 1000  # a fresh bucket: exact
    assert abs(response.throttle_ms - owed_ms) <= 2
    assert elapsed_s >= response.throttle_ms / 1000 * 0.95


def test_storage_over_quota_refuses_produce_without_writing_until_a_push_lifts_it(
    broker: BrokerProcess,
) -> None:
    push = Pusher(broker)
    message = "tenant 'acme' stores 2147483648 bytes, over its max_storage_bytes of 1073741824"
    with stubs(broker) as s:
        create(s, "acme.full")
        create(s, "globex.fine")
        assert produce(s, "acme.full", 0, values_batch([b"before"])).error == 0
        push(admin_pb2.TenantQuota(tenant="acme", storage_exceeded=True, storage_message=message))
        refused = produce(s, "acme.full", 0, values_batch([b"refused"]))
        assert refused.error == ErrorCode.QUOTA_EXCEEDED
        assert refused.error_message == message
        assert refused.base_offset == -1
        assert end_offset(s, "acme.full") == 1
        assert produce(s, "globex.fine", 0, values_batch([b"ok"])).error == 0
        # A mixed request: only the tenant over its storage is refused.
        mixed = s.broker.Produce(
            broker_pb2.ProduceRequest(
                acks=1,
                partitions=[
                    broker_pb2.PartitionRecords(
                        topic="acme.full", partition=0, records=values_batch([b"no"])
                    ),
                    broker_pb2.PartitionRecords(
                        topic="globex.fine", partition=0, records=values_batch([b"yes"])
                    ),
                ],
            ),
            timeout=TIMEOUT_S,
        )
        assert [r.error for r in mixed.results] == [ErrorCode.QUOTA_EXCEEDED, 0]
        push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=10**9))
        assert produce(s, "acme.full", 0, values_batch([b"after"])).error == 0
        values = [r.value for r in fetch_records(s, "acme.full")]
    assert values == [b"before", b"after"]
    assert scrape(broker, "meridian_broker_quota_refusals_total", tenant="acme") == 2


def test_admin_calls_and_internal_topics_are_never_throttled(broker: BrokerProcess) -> None:
    push = Pusher(broker)
    tiny = {"produce_bytes_per_s": 1, "fetch_bytes_per_s": 1, "requests_per_s": 1}
    push(admin_pb2.TenantQuota(tenant="acme", **tiny))
    with stubs(broker) as s:
        for i in range(5):
            create(s, f"acme.t{i}")  # Admin: never charged
        s.admin.DescribeState(admin_pb2.DescribeStateRequest(), timeout=TIMEOUT_S)
        offsets = broker_pb2.FetchRequest(
            max_wait_ms=0,
            partitions=[
                broker_pb2.FetchPartition(topic="__consumer_offsets", partition=p, fetch_offset=0)
                for p in range(4)
            ],
        )
        for _ in range(3):
            assert s.broker.Fetch(offsets, timeout=TIMEOUT_S).throttle_ms == 0
        assert scrape(broker, "meridian_broker_throttled_requests_total") == 0
        # The same tenant's client calls are: a second request in a second at 1/s is held.
        asked = broker_pb2.MetadataRequest(topics=["acme.t0"])
        s.broker.Metadata(asked, timeout=TIMEOUT_S)
        _, elapsed_s = timed(s.broker.Metadata, asked)
    assert elapsed_s >= 0.5  # about 1 s owed, less what refilled between the two calls
    assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="acme") == 1


def test_group_calls_count_against_the_groups_tenant(broker: BrokerProcess) -> None:
    push = Pusher(broker)
    push(admin_pb2.TenantQuota(tenant="acme", requests_per_s=1))
    with broker.channel() as channel:
        groups = group_pb2_grpc.GroupCoordinatorStub(channel)
        for _ in range(3):
            groups.FindCoordinator(
                group_pb2.FindCoordinatorRequest(group_id="acme.billing"), timeout=TIMEOUT_S
            )
            groups.FindCoordinator(
                group_pb2.FindCoordinatorRequest(group_id="globex.billing"), timeout=TIMEOUT_S
            )
    assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="acme") >= 1
    assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="globex") == 0


def test_the_persisted_push_applies_quotas_after_a_restart(broker: BrokerProcess) -> None:
    push = Pusher(broker)
    with stubs(broker) as s:
        create(s, "acme.kept")
    push(admin_pb2.TenantQuota(tenant="acme", storage_exceeded=True, storage_message="full"))
    broker.restart()
    with stubs(broker) as s:
        refused = produce(s, "acme.kept", 0, values_batch([b"x"]))
    assert refused.error == ErrorCode.QUOTA_EXCEEDED
    assert refused.error_message == "full"


def test_a_new_push_changes_a_tenants_rate(broker: BrokerProcess) -> None:
    push = Pusher(broker)
    push(admin_pb2.TenantQuota(tenant="acme", requests_per_s=1))
    asked = broker_pb2.MetadataRequest(topics=["acme.rated"])
    with stubs(broker) as s:
        create(s, "acme.rated")
        for _ in range(3):
            s.broker.Metadata(asked, timeout=TIMEOUT_S)
        throttled = scrape(broker, "meridian_broker_throttled_requests_total", tenant="acme")
        assert throttled >= 1
        push(admin_pb2.TenantQuota(tenant="acme", requests_per_s=0))  # unlimited now
        for _ in range(20):
            s.broker.Metadata(asked, timeout=TIMEOUT_S)
        after = scrape(broker, "meridian_broker_throttled_requests_total", tenant="acme")
        assert after == throttled
        push(admin_pb2.TenantQuota(tenant="acme", requests_per_s=1))  # limited again
        for _ in range(3):
            s.broker.Metadata(asked, timeout=TIMEOUT_S)
    assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="acme") > after


def test_calls_refused_for_naming_another_tenant_charge_that_tenant_nothing(
    tmp_path: Path,
) -> None:
    """With authentication on, acme's Metadata, DescribeGroups and group calls naming
    beta's topic and group are refused; beta (1 request/s, a one-request burst) is
    charged none of them: its own next call is not held, the one after it is."""
    with TestIssuer() as issuer:
        broker = BrokerProcess(tmp_path / "broker-1", broker_id=1, extra_args=issuer.broker_args())
        broker.start()
        try:
            with caller(broker.address, issuer.internal_token()) as internal:
                create_topic(internal, "beta.orders")
                internal.admin.UpdateMetadata(
                    admin_pb2.UpdateMetadataRequest(
                        controller_id="test",
                        controller_epoch=1,
                        cluster_id="meridian",
                        quotas=[admin_pb2.TenantQuota(tenant="beta", requests_per_s=1)],
                    ),
                    timeout=TIMEOUT_S,
                )
            metadata = broker_pb2.MetadataRequest(topics=["beta.orders"])
            described = group_pb2.DescribeGroupsRequest(group_ids=["beta.g"])
            with caller(broker.address, issuer.token(tenants={"acme": "developer"})) as acme:
                for _ in range(10):
                    (topic,) = acme.broker.Metadata(metadata, timeout=TIMEOUT_S).topics
                    assert topic.error == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                    (group,) = acme.group.DescribeGroups(described, timeout=TIMEOUT_S).groups
                    assert group.error == ErrorCode.GROUP_AUTHORIZATION_FAILED
                    coordinator = group_pb2.FindCoordinatorRequest(group_id="beta.g")
                    assert "GROUP_AUTHORIZATION_FAILED" in outcome(
                        acme.group.FindCoordinator, coordinator
                    )
            assert scrape(broker, "meridian_broker_throttled_requests_total") == 0
            assert scrape(broker, "meridian_broker_throttle_seconds_total") == 0
            with caller(broker.address, issuer.token(tenants={"beta": "developer"})) as beta:
                (topic,) = beta.broker.Metadata(metadata, timeout=TIMEOUT_S).topics
                assert topic.error == 0
                assert scrape(broker, "meridian_broker_throttled_requests_total") == 0
                beta.broker.Metadata(metadata, timeout=TIMEOUT_S)  # over its one request/s
            assert scrape(broker, "meridian_broker_throttled_requests_total", tenant="beta") == 1
        finally:
            broker.kill()


def test_concurrent_unary_produces_of_a_tenant_over_quota_are_admitted_at_its_rate(
    broker: BrokerProcess,
) -> None:
    """Twenty produces sent at once, five times the one-second burst in all: the broker
    appends them about as fast as the rate refills the bucket (not all at once, their
    answers held later). Bytes accepted are sampled from the log end offset; each sample
    is compared with what the quota allows by then (the burst, the rate times the time
    since sending, and one call admitted ahead), as a ratio."""
    rate_bytes_per_s, calls = 16 * KIB, 20
    push = Pusher(broker)
    push(admin_pb2.TenantQuota(tenant="burst", produce_bytes_per_s=rate_bytes_per_s))
    records = batch_of(4 * KIB)
    per_call = 4 * KIB // 1000  # records in one batch
    samples: list[tuple[float, int]] = []
    with stubs(broker) as s:
        create(s, "burst.orders")
        started = time.monotonic()
        with ThreadPoolExecutor(calls) as pool:
            sent = [
                pool.submit(s.broker.Produce, produce_request("burst.orders", records), 30)
                for _ in range(calls)
            ]
            while not all(f.done() for f in sent):
                accepted = end_offset(s, "burst.orders") // per_call * len(records)
                samples.append((time.monotonic() - started, accepted))
                time.sleep(0.1)
            responses = [f.result() for f in sent]
        finished_s = time.monotonic() - started
        assert end_offset(s, "burst.orders") == calls * per_call
    assert all(r.results[0].error == 0 for r in responses)
    ratios = [
        accepted / (rate_bytes_per_s + rate_bytes_per_s * at_s + len(records))
        for at_s, accepted in samples
    ]
    # Unthrottled work would be all 80 KiB within the first samples: a ratio near 3.
    assert max(ratios) <= 1.5, samples
    # And not starved: the whole lot at a third of the rate at least.
    total_bytes = calls * len(records)
    assert total_bytes / (rate_bytes_per_s + rate_bytes_per_s * finished_s) >= 0.33, samples
