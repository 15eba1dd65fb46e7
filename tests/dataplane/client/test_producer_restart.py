"""A broker killed and restarted under a producer: nothing lost, nothing stored twice."""

from __future__ import annotations

from dataplane.client import Admin, Producer
from tests.support.brokers import BrokerProcess

from .support import read_all


def test_retries_across_a_broker_restart_store_each_record_once(broker: BrokerProcess) -> None:
    """In-flight batches whose answers die with the broker are resent; the restarted
    broker recognises the ones it had stored (producer state rebuilt from the log)."""
    name = "test.restart"
    with Admin(broker.address) as admin:
        admin.create_topic(name, 2)
    values = [b"%05d" % i for i in range(3000)]
    with Producer(broker.address, linger_ms=1, batch_bytes=2048, retry_backoff_ms=20) as producer:
        futures = [producer.send(name, v, key=v[-1:]) for v in values[:1000]]
        futures[-1].result(10)
        futures += [producer.send(name, v, key=v[-1:]) for v in values[1000:1500]]
        broker.kill()
        futures += [producer.send(name, v, key=v[-1:]) for v in values[1500:2000]]
        broker.start()
        futures += [producer.send(name, v, key=v[-1:]) for v in values[2000:]]
        producer.flush(60)
        placed = [f.result(0) for f in futures]
    stored = read_all(broker.address, name, 2)
    for partition, records in stored.items():
        sent = [v for v, m in zip(values, placed, strict=True) if m.partition == partition]
        assert [r.value for r in records] == sent
        assert [r.offset for r in records] == list(range(len(sent)))
    assert sorted(m.offset for m in placed if m.partition == 0) == list(range(len(stored[0])))
