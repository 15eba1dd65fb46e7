"""The topic page's offsets and sizes come from the partitions' leaders, a real broker
here; a leader that does not answer leaves the last reported figures, and the page
never shows where brokers are."""

from __future__ import annotations

import re

from controlplane.core.actors import Actor
from controlplane.regions.models import Broker
from controlplane.topics import services
from controlplane.topics.models import PartitionAssignment
from controlplane.topics.reconcile import reconcile_topic
from dataplane.client import Producer
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster
from tests.web.pages.conftest import ConsoleFactory


def rows(page: str) -> list[list[str]]:
    body = page.split('id="partitions-heading"', 1)[1].split("</tbody>", 1)[0]
    return [re.findall(r"<td>(.*?)</td>", row, re.S) for row in body.split("<tr>")[2:]]


def test_offsets_and_size_are_read_from_the_leader(
    broker: BrokerProcess, console_for: ConsoleFactory
) -> None:
    cluster = register_static_cluster([broker])
    tenant = make_tenant("acme", region=cluster.region)
    topic = services.create_topic(
        tenant, name="orders", partitions=2, replication_factor=1, actor=Actor.system("test")
    )
    reconcile_topic(topic.pk)
    PartitionAssignment.objects.filter(topic=topic).update(
        leader=Broker.objects.get(cluster=cluster)
    )
    with Producer([broker.address]) as producer:
        for value in (b"a", b"b", b"c"):
            producer.send("acme.orders", value, partition=0).result(timeout=10)
    client = console_for(roles={"acme": "viewer"})

    page = client.get("/console/t/acme/topics/acme.orders/").content.decode()
    first, second = rows(page)
    assert first[:2] == ["0", "broker 1"]
    assert (first[4], first[5]) == ("0", "3")  # start and end offset, read live
    assert first[6] != "0\xa0bytes"
    assert (second[4], second[5]) == ("0", "0")
    port = broker.address.rsplit(":", 1)[1]
    assert broker.address not in page
    assert f":{port}" not in page

    broker.kill()
    page = client.get("/console/t/acme/topics/acme.orders/").content.decode()
    first, _ = rows(page)
    assert first[4] == "—"  # no start offset without the leader
    assert "last reported" in first[5]
    assert f":{port}" not in page
