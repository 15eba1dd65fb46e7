"""Tiered storage benchmark: upload throughput, catch-up reads from the remote tier, and
what uploads cost produce.

1. **Upload throughput**: a partition log of ``--mib`` MiB in 16 MiB segments is written
   (and fsynced) with the storage engine, which gives the local disk's write rate; its
   sealed segments are then uploaded (``dataplane.tiered.upload``, one manifest version
   each, as a leader does) to a local folder and to an S3 endpoint (moto's server, started
   here on 127.0.0.1). MB/s of segment bytes, and the ratio to the disk's rate.
2. **Catch-up reads** (one broker process with a local-folder store): the same records
   in a plain topic and in a tiered one whose local copy is gone (``local_retention_bytes``
   0); the broker restarts (a cold cache), then both are read from offset 0 with raw
   Fetch calls of 8 MiB. MB/s of each, and remote / local (aim: >= 50 %).
3. **Produce while uploading**: ``Producer.send_batch`` of 100 B values into a plain
   topic and into a tiered one with 16 MiB segments, whose uploads run meanwhile, in
   alternating rounds; the median of the rounds and tiered / plain (aim: >= 90 %, i.e. at
   most 10 % lower).

``.venv/bin/python bench/tiered.py`` (``--quick`` for a smoke run). Progress goes to
stderr, the report to stdout.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchkit import MB, Cleanup, MiB, num, print_table, progress, ratio, verdict, wait_until
from brokerload import (
    SDK_BATCH_BYTES,
    SDK_LINGER_MS,
    BenchBroker,
    build_batches,
    fetch_all,
    produce_prebuilt,
)

from dataplane._gen.meridian.v1 import admin_pb2, admin_pb2_grpc, common_pb2
from dataplane.client.connection import CHANNEL_OPTIONS
from dataplane.local import free_ports
from dataplane.storage.config import Durability, LogConfig
from dataplane.storage.log import PartitionLog
from dataplane.tiered import manifests
from dataplane.tiered.layout import Manifest
from dataplane.tiered.store import ObjectStore
from dataplane.tiered.upload import next_to_upload, upload_segment

SEGMENT_BYTES = 16 * MiB
VALUE_BYTES = 100


# -- 1. upload throughput ---------------------------------------------------------------
def write_log(directory: Path, total_bytes: int) -> tuple[PartitionLog, float]:
    """A log of ``total_bytes`` in sealed segments; (the log, seconds to write and fsync)."""
    batches = build_batches(VALUE_BYTES)
    config = LogConfig(max_segment_bytes=SEGMENT_BYTES, durability=Durability.NEVER)
    log = PartitionLog.open(directory, config)
    written = 0
    started = time.perf_counter()
    while written < total_bytes:
        batch = batches[written // len(batches[0]) % len(batches)]
        log.append(batch)
        written += len(batch)
    log.flush()
    seconds = time.perf_counter() - started
    log.roll()
    return log, seconds


def upload_all(store: ObjectStore, log: PartitionLog, topic: str) -> tuple[int, float]:
    """Upload every sealed segment with a manifest commit each; (bytes, seconds)."""
    manifest = Manifest(topic=topic, partition=0, topic_id="1")
    uploaded = 0
    started = time.perf_counter()
    for segment in next_to_upload(manifest, log.segments, log.high_watermark):
        remote = upload_segment(
            store,
            topic,
            "1",
            0,
            segment,
            start_offset=segment.base_offset,
            sidecars={},
            now_ms=int(time.time() * 1000),
        )
        manifest = manifest.next_version(
            [*manifest.segments, remote], broker_id=1, leader_epoch=0, now_ms=0
        )
        assert manifests.commit(store, manifest)
        uploaded += remote.size_bytes
    return uploaded, time.perf_counter() - started


def start_s3(cleanup: Cleanup, root: Path) -> tuple[str, dict[str, object]]:
    """moto's S3 server on 127.0.0.1, with a bucket; (URI, fsspec options)."""
    (port,) = free_ports(1)
    cleanup.popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        log=root / "moto.log",
    )
    options: dict[str, object] = {
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"endpoint_url": f"http://127.0.0.1:{port}", "region_name": "us-east-1"},
    }
    store = ObjectStore.open("s3://tiered-bench", options)

    def bucket_made() -> bool:
        try:
            store.fs.call_s3("create_bucket", Bucket="tiered-bench")
            return True
        except Exception:
            return False

    wait_until(bucket_made, 30, "moto's S3 server")
    return "s3://tiered-bench/objects", options


def upload_case(cleanup: Cleanup, root: Path, mib: int) -> list[list[str]]:
    progress(f"writing a {mib} MiB log")
    log, write_s = write_log(root / "log" / "bench.upload-0", mib * MiB)
    size = log.size_bytes
    rows = [["local disk (append + fsync)", num(size / write_s / MB, 1), "1.00x", ""]]
    try:
        targets = [("local folder", str(root / "objects"), {})]
        uri, options = start_s3(cleanup, root)
        targets.append(("S3 endpoint (moto)", uri, options))
        for name, target, opts in targets:
            progress(f"uploading to {name}")
            store = ObjectStore.open(target, opts)
            uploaded, seconds = upload_all(store, log, "bench.upload")
            rate = uploaded / seconds / MB
            rows.append([name, num(rate, 1), ratio(rate, size / write_s / MB), ""])
    finally:
        log.close()
    return rows


# -- 2 and 3: a broker with a store ----------------------------------------------------------
class TierBroker:
    def __init__(self, cleanup: Cleanup, root: Path) -> None:
        (port,) = free_ports(1)
        args = ["--remote-store-uri", str(root / "objects"), "--tier-interval-ms", "200"]
        self.local = BenchBroker(1, port, root / "broker-1" / "data", extra_args=args)
        cleanup.adopt(self.local)
        self.local.start(300)

    @property
    def address(self) -> str:
        return self.local.address

    def admin(self) -> admin_pb2_grpc.AdminStub:
        import grpc

        return admin_pb2_grpc.AdminStub(
            grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)
        )

    def create(self, topic: str, **config: object) -> None:
        spec = admin_pb2.PartitionSpec(
            topic=topic,
            partition=0,
            config=common_pb2.PartitionConfig(max_message_bytes=8 * MiB, **config),
        )
        response = self.admin().CreatePartitions(
            admin_pb2.CreatePartitionsRequest(partitions=[spec]), timeout=60
        )
        assert not response.results[0].error, response

    def state(self, topic: str) -> admin_pb2.PartitionState:
        answer = self.admin().DescribeState(
            admin_pb2.DescribeStateRequest(topics=[topic]), timeout=60
        )
        return answer.partitions[0]


def catch_up_case(broker: TierBroker, mib: int) -> list[list[str]]:
    batches = build_batches(VALUE_BYTES)
    records = mib * MiB // (VALUE_BYTES + 8)
    broker.create("bench.plain", max_segment_bytes=SEGMENT_BYTES)
    broker.create(
        "bench.tiered",
        max_segment_bytes=SEGMENT_BYTES,
        remote_storage=True,
        local_retention_bytes=0,
        topic_id="2",
    )
    for topic in ("bench.plain", "bench.tiered"):
        progress(f"producing {mib} MiB to {topic}")
        produce_prebuilt(broker.address, [(topic, 0)], batches, records, 600)
    progress("waiting for the tiered topic to leave the local disk")
    end = broker.state("bench.tiered").log_end_offset

    def uploaded() -> bool:
        state = broker.state("bench.tiered")
        return state.remote_end_offset > 0 and state.log_start_offset >= state.remote_end_offset

    wait_until(uploaded, 600, "the uploads")
    remote_end = broker.state("bench.tiered").remote_end_offset
    progress("restarting the broker (a cold cache)")
    broker.local.stop(60)
    broker.local.start(300)
    wait_until(lambda: broker.state("bench.tiered").remote_segments > 0, 60, "the manifest")
    rows = []
    rates = {}
    for topic, label in (("bench.plain", "local log"), ("bench.tiered", "remote tier")):
        limit = remote_end if topic == "bench.tiered" else end
        started = time.perf_counter()
        got = fetch_all(broker.address, topic, limit, 600)
        seconds = time.perf_counter() - started
        size = got * (VALUE_BYTES + 8)
        rates[label] = size / seconds / MB
        rows.append([label, num(got), num(rates[label], 1), ""])
    share = rates["remote tier"] / rates["local log"]
    rows[-1][3] = f"{share:.0%} of local {verdict(share >= 0.5)}"
    return rows


def produce_case(broker: TierBroker, rounds: int, records: int) -> list[list[str]]:
    from dataplane.client import Producer

    broker.create("bench.produce-plain", max_segment_bytes=SEGMENT_BYTES)
    broker.create(
        "bench.produce-tiered",
        max_segment_bytes=SEGMENT_BYTES,
        remote_storage=True,
        local_retention_bytes=0,
        topic_id="3",
    )
    value = b"x" * VALUE_BYTES
    rates: dict[str, list[float]] = {"plain": [], "tiered": []}
    for round_ in range(rounds):
        for name in ("plain", "tiered"):
            topic = f"bench.produce-{name}"
            with Producer(
                broker.address, acks=1, linger_ms=SDK_LINGER_MS, batch_bytes=SDK_BATCH_BYTES
            ) as producer:
                started = time.perf_counter()
                calls = [
                    producer.send_batch(topic, [value] * 10_000) for _ in range(records // 10_000)
                ]
                producer.flush()
                for call in calls:
                    assert call.exception(timeout=120) is None
                rates[name].append(records / (time.perf_counter() - started))
        plain, tiered = rates["plain"][-1], rates["tiered"][-1]
        progress(f"round {round_ + 1}: plain {plain:,.0f}/s, tiered {tiered:,.0f}/s")
    state = broker.state("bench.produce-tiered")
    plain, tiered = statistics.median(rates["plain"]), statistics.median(rates["tiered"])
    share = tiered / plain
    return [
        ["plain topic", num(plain), "", ""],
        [
            "tiered topic, uploading",
            num(tiered),
            f"{share:.0%} of plain {verdict(share >= 0.9)}",
            f"{state.remote_segments} segments uploaded meanwhile",
        ],
    ]


def run(root: Path, mib: int, quick: bool) -> tuple[list[list[str]], ...]:
    with Cleanup(root) as cleanup:
        upload_rows = upload_case(cleanup, cleanup.mkdtemp("upload-"), mib)
        broker = TierBroker(cleanup, cleanup.mkdtemp("broker-"))
        catch_up_rows = catch_up_case(broker, mib // 2)
        produce_rows = produce_case(broker, 3 if quick else 5, 200_000 if quick else 1_000_000)
    return upload_rows, catch_up_rows, produce_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a smoke run (small sizes)")
    parser.add_argument("--dir", type=Path, help="where to put data (default: a temp dir)")
    args = parser.parse_args(argv)
    mib = 64 if args.quick else 512
    root = Path(tempfile.mkdtemp(prefix="tiered-bench-", dir=args.dir))
    try:
        rows = run(root, mib, args.quick)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    upload_rows, catch_up_rows, produce_rows = rows
    segments = SEGMENT_BYTES // MiB
    print(f"# Tiered storage ({os.cpu_count()} CPUs; {mib} MiB, {segments} MiB segments)")
    print_table("Upload throughput (segment bytes)", ["to", "MB/s", "vs disk", ""], upload_rows)
    print_table(
        "Catch-up reads from offset 0 (cold cache, raw Fetch of 8 MiB)",
        ["from", "records", "MB/s", "remote / local"],
        catch_up_rows,
    )
    print_table(
        f"Produce while uploading (SDK send_batch, {VALUE_BYTES} B values, median)",
        ["topic", "records/s", "tiered / plain", ""],
        produce_rows,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
