"""Processes the transaction fault tests kill (``support.Worker`` starts them).

python -m tests.dataplane.broker.txn.worker open-txn BOOTSTRAP TID TOPIC COUNT TIMEOUT_MS
    a transaction with COUNT acknowledged records, left open: prints "ready", waits
python -m tests.dataplane.broker.txn.worker eos BOOTSTRAP GROUP SOURCE SINK TID
    consume-transform-produce, exactly once: each record of SOURCE becomes one record
    "<partition>:<offset>" of SINK, in a transaction with the consumed offsets;
    prints "progress" after its first committed transaction, runs until killed
python -m tests.dataplane.broker.txn.worker half BOOTSTRAP GROUP TOPIC KEY STATE
    a half message with KEY, then its local transaction (KEY appended to the STATE
    file); prints "ready" and waits, never committing it
"""

from __future__ import annotations

import faulthandler
import signal
import sys
import threading
from pathlib import Path

from dataplane.client import Consumer, MeridianError, Producer, TopicPartition


def open_txn(bootstrap: str, tid: str, topic: str, count: str, timeout_ms: str) -> None:
    producer = Producer(bootstrap, transactional_id=tid, transaction_timeout_ms=int(timeout_ms))
    producer.init_transactions()
    producer.begin_transaction()
    for i in range(int(count)):
        producer.send(topic, f"{tid}-{i}".encode(), partition=i % 3)
    producer.flush()
    print("ready", flush=True)
    threading.Event().wait()


def eos(bootstrap: str, group: str, source: str, sink: str, tid: str) -> None:
    producer = Producer(bootstrap, transactional_id=tid, transaction_timeout_ms=4_000, linger_ms=2)
    producer.init_transactions()
    consumer = _eos_consumer(bootstrap, group, source)
    told = False
    while True:
        records = consumer.poll(timeout_ms=200)
        if not records:
            continue
        producer.begin_transaction()
        try:
            offsets: dict[TopicPartition, int] = {}
            for record in records:
                tag = f"{record.partition}:{record.offset}".encode()
                producer.send(sink, tag, partition=record.partition)
                offsets[TopicPartition(record.topic, record.partition)] = record.offset + 1
            producer.send_offsets_to_transaction(offsets, consumer.group_metadata())
            producer.commit_transaction()
        except MeridianError as error:  # a rebalance fenced this generation: start over
            print(f"aborting: {error}", file=sys.stderr, flush=True)
            producer.abort_transaction()
            consumer.close(commit=False)  # the next one reads from the committed offsets
            consumer = _eos_consumer(bootstrap, group, source)
            continue
        if not told:
            print("progress", flush=True)
            told = True


def _eos_consumer(bootstrap: str, group: str, source: str) -> Consumer:
    consumer = Consumer(
        bootstrap,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        session_timeout_ms=3_000,
        heartbeat_interval_ms=500,
        max_poll_records=50,
    )
    consumer.subscribe([source])
    return consumer


def half(bootstrap: str, group: str, topic: str, key: str, state: str) -> None:
    producer = Producer(bootstrap, producer_group=group, half_check_interval_ms=500)
    producer.send_half(topic, f"half {key}".encode(), key=key.encode(), partition=0)
    with Path(state).open("a") as file:  # the local transaction commits
        file.write(key + "\n")
    print("ready", flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    faulthandler.register(signal.SIGUSR1)  # a test that waits in vain asks for the stacks
    modes = {"open-txn": open_txn, "eos": eos, "half": half}
    modes[sys.argv[1]](*sys.argv[2:])
