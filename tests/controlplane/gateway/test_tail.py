"""The tail reader of the Index Query, on a real broker: the records from an offset to
the high watermark, in order, with their headers, in batches of any size; only the
topics it was opened for."""

from __future__ import annotations

import pytest

from controlplane.gateway.tail import TailRefused, tail_reader
from dataplane.client import Admin, Producer
from tests.support.brokers import BrokerProcess

TOPIC = "acme.orders"


@pytest.fixture
def produced(db: None, broker: BrokerProcess) -> list[bytes]:
    values = [b"value-%d" % i for i in range(300)]
    with Admin(broker.address) as admin:
        admin.create_topic(TOPIC, 1)
    with Producer(broker.address, linger_ms=5) as producer:
        for i, value in enumerate(values):
            headers = [("i", b"%d" % i)] if i % 2 else None
            producer.send(TOPIC, value, key=b"k%d" % i, partition=0, headers=headers)
        producer.flush()
    return values


def test_the_tail_from_an_offset_is_every_record_after_it(
    broker: BrokerProcess, produced: list[bytes]
) -> None:
    read = tail_reader([broker.address], [TOPIC])
    records = list(read(TOPIC, 0, 123))
    assert [r.offset for r in records] == list(range(123, 300))
    assert [r.value for r in records] == produced[123:]
    assert records[0].key == b"k123"
    assert [(h.key, h.value) for h in records[0].headers] == [("i", b"123")]
    assert records[1].headers == ()
    assert list(read(TOPIC, 0, 300)) == []


def test_another_topic_is_refused(broker: BrokerProcess, produced: list[bytes]) -> None:
    read = tail_reader([broker.address], [TOPIC])
    with pytest.raises(TailRefused):
        list(read("globex.orders", 0, 0))
