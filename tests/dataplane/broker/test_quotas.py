"""Quota bookkeeping without a server: the token bucket against an injected clock, the
manager's view of the push, and what each call is charged."""

from __future__ import annotations

import asyncio

import pytest
from prometheus_client import CollectorRegistry

from dataplane._gen.meridian.v1 import admin_pb2, broker_pb2, delay_pb2, group_pb2
from dataplane.broker.auth.authorizer import tenant_of
from dataplane.broker.quotas import (
    FETCH,
    MAX_HOLD_MS,
    PRODUCE,
    REQUESTS,
    QuotaManager,
    TokenBucket,
)
from dataplane.broker.throttling import claims_of, settle, usage_of
from dataplane.errors import ErrorCode


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def push(*quotas: admin_pb2.TenantQuota, epoch: int = 1) -> admin_pb2.UpdateMetadataRequest:
    return admin_pb2.UpdateMetadataRequest(
        cluster_id="meridian", controller_epoch=epoch, quotas=list(quotas)
    )


def manager_with(
    current: list[admin_pb2.UpdateMetadataRequest | None], clock: FakeClock
) -> QuotaManager:
    return QuotaManager(lambda: current[0], registry=CollectorRegistry(), clock=clock)


# -- the bucket -------------------------------------------------------------------------
def test_a_full_bucket_absorbs_one_second_of_its_rate_then_owes() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, clock)
    assert bucket.charge(1000) == 0.0  # the burst
    assert bucket.charge(500) == pytest.approx(0.5)  # 500 owed at 1000/s
    assert bucket.charge(500) == pytest.approx(1.0)  # the debt adds up


def test_debt_is_repaid_by_time_and_tokens_never_exceed_the_burst() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, clock)
    bucket.charge(3000)  # 2 s of debt
    clock.advance(1.5)
    assert bucket.charge(0) == pytest.approx(0.5)
    clock.advance(60)  # idle far longer than the burst
    assert bucket.charge(0) == 0
    assert bucket.tokens == pytest.approx(1000)
    assert bucket.charge(1001) == pytest.approx(0.001)


def test_over_a_long_run_the_charged_rate_converges_to_the_rate() -> None:
    """A client that waits out every throttle time gets rate * elapsed (+ one burst)."""
    clock = FakeClock()
    bucket = TokenBucket(10_000, clock)
    start, sent = clock.now, 0
    while clock.now - start < 100:
        throttle = bucket.charge(4_096)
        sent += 4_096
        clock.advance(throttle + 0.0001)
    elapsed = clock.now - start
    assert sent / elapsed == pytest.approx(10_000, rel=0.02)


def test_a_new_rate_keeps_the_debt_and_caps_the_balance() -> None:
    clock = FakeClock()
    bucket = TokenBucket(1000, clock)
    bucket.charge(2000)  # 1000 owed
    bucket.set_rate(500)
    assert bucket.charge(0) == pytest.approx(2.0)  # same debt, half the rate
    fresh = TokenBucket(1000, clock)
    fresh.set_rate(100)
    assert fresh.tokens == pytest.approx(100)


def test_a_bucket_needs_a_positive_rate() -> None:
    with pytest.raises(ValueError, match="rate_per_s"):
        TokenBucket(0, FakeClock())


# -- tenants ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "tenant"),
    [
        ("acme.orders", "acme"),
        ("acme.orders~ppe", "acme"),
        ("acme.billing", "acme"),
        ("__consumer_offsets", None),
        ("__delay.acme", "acme"),  # a tenant's timer log: its delayed records are its
        ("__acme.x", None),
        ("orders", None),
        (".orders", None),
        ("acme.", None),
    ],
)
def test_the_tenant_is_the_prefix_of_a_name(name: str, tenant: str | None) -> None:
    assert tenant_of(name) == tenant


# -- the manager ------------------------------------------------------------------------
def test_only_listed_tenants_with_a_rate_are_throttled() -> None:
    clock = FakeClock()
    current = [push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=100))]
    quotas = manager_with(current, clock)  # type: ignore[arg-type]
    first = quotas.charge({("acme", PRODUCE): 300, ("other", PRODUCE): 10**9})
    assert first.tenant == "acme"
    assert first.kind == PRODUCE
    assert first.seconds == pytest.approx(2.0)
    assert quotas.charge({("acme", FETCH): 10**9, ("acme", REQUESTS): 10**6}).seconds == 0


def test_a_new_push_changes_rates_and_drops_tenants_no_longer_listed() -> None:
    clock = FakeClock()
    current = [push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=100))]
    quotas = manager_with(current, clock)  # type: ignore[arg-type]
    assert quotas.charge({("acme", PRODUCE): 300}).seconds == pytest.approx(2.0)
    current[0] = push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=200), epoch=2)
    assert quotas.charge({("acme", PRODUCE): 0}).seconds == 0  # a zero charge owes nothing new
    bucket = quotas.bucket("acme", PRODUCE)
    assert bucket is not None
    assert bucket.rate_per_s == 200
    assert bucket.charge(0) == pytest.approx(1.0)  # the 200 owed, now repaid at 200/s
    current[0] = push(epoch=3)
    assert quotas.charge({("acme", PRODUCE): 10**9}).seconds == 0
    assert quotas.bucket("acme", PRODUCE) is None
    current[0] = None
    assert quotas.charge({("acme", PRODUCE): 10**9}).seconds == 0


def test_storage_refusal_names_the_pushed_message_and_counts() -> None:
    registry = CollectorRegistry()
    current = [
        push(
            admin_pb2.TenantQuota(
                tenant="acme", storage_exceeded=True, storage_message="acme stores 2 GiB of 1 GiB"
            )
        )
    ]
    quotas = QuotaManager(lambda: current[0], registry=registry)
    refusal = quotas.storage_refusal("acme.orders")
    assert refusal is not None
    assert refusal.code == ErrorCode.QUOTA_EXCEEDED
    assert not refusal.retriable
    assert refusal.message == "acme stores 2 GiB of 1 GiB"
    assert quotas.storage_refusal("other.orders") is None
    assert quotas.storage_refusal("__consumer_offsets") is None
    assert quotas.storage_refusal("__delay.acme") is not None  # no delaying past the quota
    value = registry.get_sample_value("meridian_broker_quota_refusals_total", {"tenant": "acme"})
    assert value == 2


def test_a_hold_is_capped_but_the_throttle_time_is_reported_whole() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    clock = FakeClock()
    current = [push(admin_pb2.TenantQuota(tenant="acme", requests_per_s=1))]
    quotas = QuotaManager(
        lambda: current[0], registry=CollectorRegistry(), clock=clock, sleep=sleep
    )
    throttle = quotas.charge({("acme", REQUESTS): 61})  # 60 requests owed at 1/s
    assert throttle.ms == 60_000
    asyncio.run(quotas.hold(throttle))
    assert slept == [MAX_HOLD_MS / 1000]


# -- what a call is charged -------------------------------------------------------------
def test_produce_is_charged_the_bytes_of_accepted_partitions_and_one_request_per_tenant() -> None:
    request = broker_pb2.ProduceRequest(
        partitions=[
            broker_pb2.PartitionRecords(topic="acme.a", partition=0, records=b"x" * 100),
            broker_pb2.PartitionRecords(topic="acme.a", partition=1, records=b"x" * 50),
            broker_pb2.PartitionRecords(topic="globex.b", partition=0, records=b"x" * 70),
            broker_pb2.PartitionRecords(topic="__consumer_offsets", partition=0, records=b"x"),
        ]
    )
    response = broker_pb2.ProduceResponse(
        results=[
            broker_pb2.PartitionProduceResult(topic="acme.a", partition=0),
            broker_pb2.PartitionProduceResult(topic="acme.a", partition=1),
            broker_pb2.PartitionProduceResult(
                topic="globex.b", partition=0, error=ErrorCode.TOPIC_AUTHORIZATION_FAILED
            ),
            broker_pb2.PartitionProduceResult(topic="__consumer_offsets", partition=0),
        ]
    )
    assert usage_of(request, response) == {("acme", PRODUCE): 150, ("acme", REQUESTS): 1}


def test_fetch_metadata_and_group_calls_are_charged_to_the_named_tenant() -> None:
    fetch = broker_pb2.FetchResponse(
        results=[
            broker_pb2.FetchPartitionResult(topic="acme.a", partition=0, records=b"y" * 30),
            broker_pb2.FetchPartitionResult(topic="acme.a", partition=1, records=b"y" * 12),
        ]
    )
    assert usage_of(broker_pb2.FetchRequest(), fetch) == {
        ("acme", FETCH): 42,
        ("acme", REQUESTS): 1,
    }
    metadata = broker_pb2.MetadataResponse(
        topics=[broker_pb2.TopicMetadata(name="acme.a"), broker_pb2.TopicMetadata(name="b.c")]
    )
    assert usage_of(broker_pb2.MetadataRequest(topics=["acme.a"]), metadata) == {
        ("acme", REQUESTS): 1
    }
    assert usage_of(broker_pb2.MetadataRequest(), metadata) == {}  # no tenant named
    heartbeat = group_pb2.HeartbeatRequest(group_id="acme.billing")
    assert usage_of(heartbeat, group_pb2.HeartbeatResponse()) == {("acme", REQUESTS): 1}
    commit = group_pb2.OffsetCommitRequest(group_id="acme.billing")
    assert usage_of(commit, group_pb2.OffsetCommitResponse()) == {("acme", REQUESTS): 1}


def test_list_offsets_and_group_deletes_are_charged_only_for_answered_names() -> None:
    offsets = broker_pb2.ListOffsetsResponse(
        results=[
            broker_pb2.ListOffsetsResult(topic="acme.a", partition=0),
            broker_pb2.ListOffsetsResult(
                topic="globex.b", partition=0, error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            ),
        ]
    )
    assert usage_of(broker_pb2.ListOffsetsRequest(), offsets) == {("acme", REQUESTS): 1}
    deleted = group_pb2.DeleteGroupsResponse(
        results=[
            group_pb2.DeleteGroupsResult(group_id="acme.g"),
            group_pb2.DeleteGroupsResult(
                group_id="globex.g", error=ErrorCode.GROUP_AUTHORIZATION_FAILED
            ),
        ]
    )
    request = group_pb2.DeleteGroupsRequest(group_ids=["acme.g", "globex.g"])
    assert usage_of(request, deleted) == {("acme", REQUESTS): 1}


def test_names_the_broker_refused_charge_their_tenant_nothing() -> None:
    refused = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    metadata = broker_pb2.MetadataResponse(
        topics=[
            broker_pb2.TopicMetadata(name="victim.orders", error=refused),
            broker_pb2.TopicMetadata(name="acme.a"),
        ]
    )
    asked = broker_pb2.MetadataRequest(topics=["victim.orders", "acme.a"])
    assert usage_of(asked, metadata) == {("acme", REQUESTS): 1}
    described = group_pb2.DescribeGroupsResponse(
        groups=[
            group_pb2.GroupDescription(
                group_id="victim.g", error=ErrorCode.GROUP_AUTHORIZATION_FAILED
            ),
            group_pb2.GroupDescription(group_id="acme.g"),
        ]
    )
    request = group_pb2.DescribeGroupsRequest(group_ids=["victim.g", "acme.g"])
    assert usage_of(request, described) == {("acme", REQUESTS): 1}
    group_refused = ErrorCode.GROUP_AUTHORIZATION_FAILED
    for call, response in [
        (group_pb2.JoinGroupRequest(group_id="victim.g"), group_pb2.JoinGroupResponse()),
        (group_pb2.HeartbeatRequest(group_id="victim.g"), group_pb2.HeartbeatResponse()),
        (
            group_pb2.FindCoordinatorRequest(group_id="victim.g"),
            group_pb2.FindCoordinatorResponse(),
        ),
        (group_pb2.OffsetCommitRequest(group_id="victim.g"), group_pb2.OffsetCommitResponse()),
        (group_pb2.OffsetFetchRequest(group_id="victim.g"), group_pb2.OffsetFetchResponse()),
    ]:
        assert usage_of(call, response) == {("victim", REQUESTS): 1}  # answered: charged
        response.error = group_refused
        assert usage_of(call, response) == {}, type(call).__name__
    assert usage_of(group_pb2.ListGroupsRequest(), group_pb2.ListGroupsResponse()) == {}


def test_claims_name_the_produce_bytes_and_a_request_of_each_tenant() -> None:
    produce = broker_pb2.ProduceRequest(
        partitions=[
            broker_pb2.PartitionRecords(topic="acme.a", partition=0, records=b"x" * 100),
            broker_pb2.PartitionRecords(topic="acme.a", partition=1, records=b"x" * 20),
            broker_pb2.PartitionRecords(topic="__consumer_offsets", partition=0, records=b"x"),
        ]
    )
    assert claims_of(produce) == {("acme", PRODUCE): 120, ("acme", REQUESTS): 1}
    fetch = broker_pb2.FetchRequest(partitions=[broker_pb2.FetchPartition(topic="acme.a")])
    assert claims_of(fetch) == {("acme", FETCH): 0, ("acme", REQUESTS): 1}
    join = group_pb2.JoinGroupRequest(group_id="globex.g")
    assert claims_of(join) == {("globex", REQUESTS): 1}


def test_delay_calls_claim_and_are_charged_a_request_of_their_tenant() -> None:
    for call in (
        delay_pb2.ListDelayedRequest(tenant="acme", partition=0),
        delay_pb2.CancelDelayedRequest(id="acme.orders:0:5"),
        delay_pb2.DescribeDelayRequest(tenants=["acme"]),
        delay_pb2.GetRetryPolicyRequest(group_id="acme.billing"),
    ):
        assert claims_of(call) == {("acme", REQUESTS): 1}, type(call).__name__
    listed = usage_of(delay_pb2.ListDelayedRequest(tenant="acme"), delay_pb2.ListDelayedResponse())
    assert listed == {("acme", REQUESTS): 1}
    refused = delay_pb2.CancelDelayedResponse(error=ErrorCode.DELAYED_RECORD_NOT_FOUND)
    assert usage_of(delay_pb2.CancelDelayedRequest(id="acme.orders:0:5"), refused) == {}
    assert claims_of(delay_pb2.DescribeDelayRequest()) == {}  # every tenant: internal only


def test_a_call_of_a_tenant_in_debt_waits_before_running_and_calls_queue_at_the_rate() -> None:
    clock = FakeClock()
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(seconds)

    current = [push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=1000))]
    quotas = QuotaManager(
        lambda: current[0], registry=CollectorRegistry(), clock=clock, sleep=sleep
    )
    claim = {("acme", PRODUCE): 500}
    assert asyncio.run(quotas.admit(claim)) == 0.0  # no bucket yet: nothing owed
    quotas.release(claim)
    quotas.charge({("acme", PRODUCE): 3000})  # 2 s owed
    assert asyncio.run(quotas.admit(claim)) == pytest.approx(2.0)
    # Admitted but not yet charged: the next call waits for it too (0.5 s of bytes).
    assert asyncio.run(quotas.admit(claim)) == pytest.approx(0.5)
    quotas.release(claim)
    quotas.release(claim)
    # What was waited shortens the response's hold, within the cap in all.
    throttle = quotas.charge({("acme", PRODUCE): 1000}, waited_s=0.5)  # 500 refilled
    assert throttle.seconds == pytest.approx(0.5)
    assert quotas.hold_s(throttle) == pytest.approx(0.5)
    assert quotas.hold_s(throttle, waited_s=MAX_HOLD_MS / 1000 - 0.1) == pytest.approx(0.1)
    # A debt beyond the cap: the wait stops at the cap; the call runs then.
    quotas.charge({("acme", PRODUCE): 60_000})
    slept.clear()
    assert asyncio.run(quotas.admit({("acme", PRODUCE): 1})) == MAX_HOLD_MS / 1000
    assert sum(slept) == MAX_HOLD_MS / 1000
    assert quotas.bucket("globex", PRODUCE) is None
    assert asyncio.run(quotas.admit({("globex", PRODUCE): 10**9})) == 0.0  # unlimited


def test_kafka_is_told_only_the_debt_ahead_and_grpc_both_holds() -> None:
    """Unheld (Kafka's way: the client backs off by what it is told), the throttle left
    out the wait already served before the call ran; held (gRPC), it counts both."""
    clock = FakeClock()
    current = [push(admin_pb2.TenantQuota(tenant="acme", produce_bytes_per_s=1000))]
    quotas = QuotaManager(lambda: current[0], registry=CollectorRegistry(), clock=clock,
                          max_hold_ms=0)  # fmt: skip

    def settled(hold: bool) -> tuple[int, int]:
        response = broker_pb2.ProduceResponse()
        # 2000 bytes on a full bucket of 1000 tokens: 1 s owed.
        told = asyncio.run(
            settle(quotas, {("acme", PRODUCE): 2000}, response, waited_s=0.7, hold=hold)
        )
        return told, response.throttle_ms

    assert settled(hold=False) == (1000, 1000)
    clock.advance(10)  # the debt repaid, the bucket full again
    assert settled(hold=True) == (1700, 1700)
