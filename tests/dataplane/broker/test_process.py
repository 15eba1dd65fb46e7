"""The broker process: crash and clean restarts, health, metrics, configuration."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import urllib.request

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from dataplane._gen.meridian.v1 import broker_pb2, broker_pb2_grpc, group_pb2, group_pb2_grpc
from dataplane.broker.app import run_broker_in_thread
from dataplane.broker.config import BrokerConfig
from dataplane.errors import ErrorCode, error_from_rpc
from tests.dataplane.broker.support import (
    create,
    fetch_records,
    produce,
    stubs,
    values_batch,
    wait_for,
)
from tests.support.brokers import REPO_ROOT, BrokerProcess, BrokerProcessError


def _stream_until_killed(s, acknowledged):
    """Produce batches of 10 records over one stream until the broker dies."""

    def requests():
        for n in range(1_000_000):
            values = [f"{n}-{i}".encode() for i in range(10)]
            records = broker_pb2.PartitionRecords(
                topic="acme.crash", partition=0, records=values_batch(values)
            )
            yield broker_pb2.ProduceRequest(acks=1, partitions=[records], correlation_id=n)

    try:
        for response in s.broker.ProduceStream(requests(), timeout=60):
            (result,) = response.results
            assert result.error == 0, result
            acknowledged.append((response.correlation_id, result.base_offset))
    except grpc.RpcError:
        pass  # the broker was killed


def test_every_acknowledged_record_survives_sigkill(broker):
    acknowledged = []
    with stubs(broker) as s:
        create(s, "acme.crash")
        writer = threading.Thread(target=_stream_until_killed, args=(s, acknowledged))
        writer.start()
        assert wait_for(lambda: len(acknowledged) >= 200, 30)
        broker.kill()
        writer.join(30)
    broker.start()
    with stubs(broker) as s:
        stored = {r.offset: r.value for r in fetch_records(s, "acme.crash")}
    assert len(acknowledged) >= 200
    for n, base_offset in acknowledged:
        values = [stored.get(base_offset + i) for i in range(10)]
        assert values == [f"{n}-{i}".encode() for i in range(10)], f"request {n} was lost"


def test_sigterm_exits_zero_and_the_next_start_is_a_clean_recovery(broker):
    with stubs(broker) as s:
        create(s, "acme.clean")
        produce(s, "acme.clean", 0, values_batch([b"kept"]))
    assert broker.terminate() == 0
    checkpoint = json.loads((broker.data_dir / "acme.clean-0" / "partition.json").read_text())
    assert checkpoint["clean_shutdown"] is True
    broker.start()
    assert "(0 recovered)" in broker.log_text().rsplit("--- start", 1)[1]
    with stubs(broker) as s:
        assert [r.value for r in fetch_records(s, "acme.clean")] == [b"kept"]


def test_the_health_service_reports_serving(broker):
    with broker.channel() as channel:
        health = health_pb2_grpc.HealthStub(channel)
        for service in ("", "meridian.v1.Broker"):
            response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)
            assert response.status == health_pb2.HealthCheckResponse.SERVING


def _scrape(broker) -> str:
    with urllib.request.urlopen(broker.metrics_url, timeout=10) as response:
        return response.read().decode()


def _sample(text: str, prefix: str) -> float:
    for line in text.splitlines():
        if line.startswith(prefix):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {prefix!r} in the metrics")


def test_the_metrics_endpoint_serves_the_named_metrics(broker):
    with stubs(broker) as s:
        create(s, "acme.metered")
        batch = values_batch([b"m"] * 10)
        produce(s, "acme.metered", 0, batch)
        fetch_records(s, "acme.metered")
        commit = group_pb2.OffsetCommitRequest(
            group_id="g1",
            generation_id=-1,
            partitions=[
                group_pb2.OffsetCommitPartition(topic="acme.metered", partition=0, offset=4)
            ],
        )
        group_pb2_grpc.GroupCoordinatorStub(s.channel).OffsetCommit(commit, timeout=10)
    text = _scrape(broker)
    tp = 'partition="0",topic="acme.metered"'
    assert _sample(text, 'meridian_broker_bytes_in_total{topic="acme.metered"}') == len(batch)
    assert _sample(text, 'meridian_broker_bytes_out_total{topic="acme.metered"}') == len(batch)
    assert _sample(text, f"meridian_partition_log_end_offset{{{tp}}}") == 10
    assert _sample(text, f"meridian_partition_high_watermark{{{tp}}}") == 10
    assert _sample(text, f"meridian_partition_size_bytes{{{tp}}}") == len(batch)
    assert _sample(text, 'meridian_broker_requests_total{error="NONE",rpc="Produce"}') == 1
    assert _sample(text, 'meridian_broker_request_seconds_count{rpc="Produce"}') == 1
    assert _sample(text, f'meridian_group_lag{{group="g1",{tp}}}') == 6
    assert _sample(text, f'meridian_group_lag_records{{group="g1",{tp}}}') == 6
    assert _sample(text, f'meridian_group_lag_seconds{{group="g1",{tp}}}') > 0


def test_a_config_file_sets_limits_and_flags_override_it(tmp_path):
    config = tmp_path / "broker.toml"
    config.write_text(
        'id = 9\nregion = "eu-west"\nmax_request_bytes = 500\n[log]\ndurability = "never"\n'
    )
    process = BrokerProcess(tmp_path / "b", broker_id=4, extra_args=["--config", str(config)])
    try:
        process.start()
        with stubs(process) as s:
            create(s, "acme.small")
            request = broker_pb2.ProduceRequest(
                acks=1,
                partitions=[
                    broker_pb2.PartitionRecords(
                        topic="acme.small", partition=0, records=values_batch([b"x" * 600])
                    )
                ],
            )
            with pytest.raises(grpc.RpcError) as caught:
                s.broker.Produce(request, timeout=10)
            assert error_from_rpc(caught.value).code == ErrorCode.MESSAGE_TOO_LARGE
            assert fetch_records(s, "acme.small") == []
            state = s.admin.DescribeState(_describe("acme.small"), timeout=10)
            assert (state.broker_id, state.region) == (4, "eu-west")
            assert state.partitions[0].config.durability == "never"
    finally:
        process.kill()


def _describe(topic):
    from dataplane._gen.meridian.v1 import admin_pb2

    return admin_pb2.DescribeStateRequest(topics=[topic])


def _run_broker(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "dataplane.broker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO_ROOT,
    )


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--data-dir", "x"], "id"),
        (["--id", "1"], "data_dir"),
        (["--id", "1", "--data-dir", "x", "--listen", "nohost"], "listen"),
        (["--id", "1", "--data-dir", "x", "--peer", "1=127.0.0.1:5"], "peers"),
        (["--id", "1", "--data-dir", "x", "--peer", "two=127.0.0.1:5"], "--peer"),
        (["--id", "-3", "--data-dir", "x"], "id"),
    ],
)
def test_an_invalid_configuration_exits_2_naming_the_field(args, named):
    result = _run_broker(*args)
    assert result.returncode == 2
    assert "invalid configuration" in result.stderr
    assert named in result.stderr


def test_a_data_directory_in_use_is_refused(broker):
    result = _run_broker("--id", "2", "--data-dir", str(broker.data_dir), "--metrics-listen", "")
    assert result.returncode == 1
    assert "in use by another process" in result.stderr
    assert broker.running


def test_a_failed_start_shows_the_brokers_log(tmp_path, broker):
    taken = BrokerProcess(tmp_path / "twin", broker_id=2, port=broker.port)
    with pytest.raises(BrokerProcessError, match="exited with 1"):
        taken.start()


def test_sigterm_ends_a_waiting_long_poll_with_an_answer(broker):
    with stubs(broker) as s:
        create(s, "acme.waiting")
        request = broker_pb2.FetchRequest(
            max_wait_ms=120_000,
            min_bytes=1,
            partitions=[broker_pb2.FetchPartition(topic="acme.waiting", partition=0)],
        )
        pending = s.broker.Fetch.future(request, timeout=60)
        assert not wait_for(pending.done, 0.3)
        assert broker.terminate() == 0
        (result,) = pending.result().results
        assert (result.error, result.records) == (0, b"")


def test_a_broker_runs_in_a_thread_of_this_process(tmp_path):
    config = BrokerConfig(broker_id=7, data_dir=tmp_path / "data", metrics_listen="")
    handle = run_broker_in_thread(config)
    try:
        with grpc.insecure_channel(handle.address) as channel:
            stub = broker_pb2_grpc.BrokerStub(channel)
            response = stub.Metadata(broker_pb2.MetadataRequest(), timeout=10)
            assert (response.broker_id, response.brokers[0].port) == (7, handle.port)
            assert handle.metrics_port == 0
    finally:
        handle.stop()
    checkpoint = json.loads(
        (tmp_path / "data" / "__consumer_offsets-0" / "partition.json").read_text()
    )
    assert checkpoint["clean_shutdown"] is True
