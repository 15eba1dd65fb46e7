"""The message browser on a real broker with authentication on, trusting the control
plane's local issuer: pages are read (and test records produced) with the signed-in
user's own token, so the broker's tenant isolation and roles decide what they get."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client

from controlplane.accounts.identity import LocalIdentity
from controlplane.core.actors import Actor
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from controlplane.topics import services
from controlplane.topics.reconcile import reconcile_topic
from dataplane.client import Producer
from dataplane.client.auth import StaticToken
from tests.controlplane.accounts.test_broker_auth import _broker, api_url, broker_auth
from tests.controlplane.conftest import token_for
from tests.support.brokers import BrokerProcess
from tests.support.controlplane import make_tenant, register_static_cluster
from tests.web.pages.conftest import ConsoleFactory
from web import records

__all__ = ["api_url", "broker_auth"]  # fixtures this module uses

URL = "/console/t/acme/topics/acme.orders/messages/"
BASE_MS = 1_700_000_000_000
BIG = b"x" * 10_000
SPECIAL = {
    3: b'{"a": 1, "nested": {"b": [1, 2]}}',
    4: "plain text, déjà vu".encode(),
    5: b"\xff\xfe\x00\x01",
    6: b"<script>alert('owned')</script>",
    7: BIG,
    8: b"bell\x07 and \x1b[31m escape",
}


@pytest.fixture
def auth_broker(
    api_url: str, local_identity: LocalIdentity, settings: Any, broker_auth: None, tmp_path: Path
) -> Iterator[BrokerProcess]:
    settings.API_BASE_URL = api_url  # the broker fetches the issuer's keys from here
    broker = _broker(tmp_path / "broker", tmp_path / "broker-secret")
    try:
        yield broker
    finally:
        broker.kill()


@pytest.fixture
def cluster(auth_broker: BrokerProcess) -> Cluster:
    return register_static_cluster([auth_broker])


@pytest.fixture
def acme(cluster: Cluster) -> Tenant:
    return make_tenant("acme", region=cluster.region)


@pytest.fixture
def orders(acme: Tenant, auth_broker: BrokerProcess, local_identity: LocalIdentity) -> str:
    """``acme.orders``: 30 records in partition 0 (some JSON, text, binary, hostile,
    large; a second apart from BASE_MS), 4 in partition 1 (the first large); one batch
    a record."""
    topic = services.create_topic(
        acme, name="orders", partitions=2, replication_factor=1, actor=Actor.system("test")
    )
    reconcile_topic(topic.pk)
    token = token_for(local_identity, roles={"acme": "developer"})
    with Producer(auth_broker.address, credentials=StaticToken(token), acks="all") as producer:
        for i in range(30):
            value = SPECIAL.get(i, f"record {i}".encode())
            headers = [("trace", b"<b>bold</b>")] if i == 6 else []
            key = b"\xc3\x28" if i == 5 else f"k{i}".encode()
            producer.send(
                "acme.orders",
                value,
                key=key,
                headers=headers,
                partition=0,
                timestamp_ms=BASE_MS + i * 1000,
            ).result(timeout=20)  # fmt: skip  (one batch a record: byte caps cut between)
        for i in range(4):
            value = BIG if i == 0 else f"p1 {i}".encode()
            producer.send("acme.orders", value, partition=1).result(timeout=20)
        producer.flush(timeout=20)
    return topic.full_name


def offsets(page: str) -> list[tuple[int, int]]:
    body = page.split('class="records"', 1)[1].split("</tbody>", 1)[0]
    rows = re.findall(r"<tr>\s*<td>(\d+)</td>\s*<td>(\d+)</td>", body)
    return [(int(p), int(o)) for p, o in rows]


def link(page: str, rel: str) -> str:
    found = re.search(rf'<a href="([^"]*)" rel="{rel}"', page)
    assert found, f"no {rel} link"
    return html.unescape(found.group(1))


def get(client: Client, query: str, status: int = 200) -> str:
    response = client.get(URL + query)
    assert response.status_code == status, response.content[:2000]
    return response.content.decode()


def test_pages_from_an_offset_a_time_and_the_newest(
    orders: str, console_for: ConsoleFactory, auth_broker: BrokerProcess
) -> None:
    client = console_for(roles={"acme": "viewer"})

    page = get(client, "?partition=0&mode=offset&offset=10&count=5")
    assert offsets(page) == [(0, o) for o in range(10, 15)]
    newer = get(client, link(page, "next"))
    assert offsets(newer) == [(0, o) for o in range(15, 20)]
    back = get(client, link(newer, "prev"))
    assert offsets(back) == [(0, o) for o in range(10, 15)]
    assert offsets(get(client, link(back, "prev"))) == [(0, o) for o in range(5, 10)]

    at_time = get(client, f"?partition=0&mode=timestamp&time={BASE_MS + 20_000}&count=3")
    assert offsets(at_time) == [(0, 20), (0, 21), (0, 22)]
    iso = get(client, "?partition=0&mode=timestamp&time=2023-11-14T22:13:40&count=3")
    assert offsets(iso) == [(0, 20), (0, 21), (0, 22)]  # BASE_MS + 20 s, in UTC

    newest = get(client, "?partition=0&mode=newest&count=4")
    assert offsets(newest) == [(0, o) for o in range(26, 30)]
    assert 'rel="next"' not in newest
    everywhere = get(client, "?partition=all&mode=newest&count=4")
    assert offsets(everywhere) == [(0, 28), (0, 29), (1, 2), (1, 3)]

    assert auth_broker.address not in page
    assert auth_broker.address.rsplit(":", 1)[1] not in page.split("<main", 1)[1]


def test_values_render_as_json_text_or_hex_capped_and_escaped(
    orders: str, console_for: ConsoleFactory
) -> None:
    client = console_for(roles={"acme": "viewer"})
    page = get(client, "?partition=0&mode=offset&offset=3&count=6")
    assert offsets(page) == [(0, o) for o in range(3, 9)]
    assert "{\n  &quot;a&quot;: 1,\n  &quot;nested&quot;: {" in page  # pretty JSON
    assert ">plain text, déjà vu</pre>" in page
    assert ">ff fe 00 01</pre>" in page  # not UTF-8: hex
    assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in page
    assert "<script>alert" not in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page
    assert "<b>bold" not in page
    assert ">c3 28</pre>" in page  # a key that is not UTF-8
    assert "bell\\x07 and \\x1b[31m escape" in page  # control characters made visible
    assert "\x07" not in page
    assert "\x1b" not in page
    assert "x" * 4096 + "</pre>" in page
    assert "x" * 4097 not in page
    assert "truncated: first 4 KiB (characters) of 10000 bytes shown" in page

    as_hex = get(client, "?partition=0&mode=offset&offset=4&count=1&view=hex")
    assert b"plain text".hex(" ") in as_hex
    as_text = get(client, "?partition=0&mode=offset&offset=3&count=1&view=text")
    assert "{&quot;a&quot;: 1, &quot;nested&quot;" in as_text  # as written, not pretty


def test_a_developer_produces_a_test_record_a_viewer_cannot(
    orders: str, console_for: ConsoleFactory
) -> None:
    viewer = console_for(roles={"acme": "viewer"})
    assert "Produce a test record" not in get(viewer, "")
    assert viewer.post(URL, {"value": "v"}).status_code == 403

    developer = console_for(roles={"acme": "developer"})
    assert "Produce a test record" in get(developer, "")
    form = {
        "key": "k",
        "value": "<img src=x onerror=alert(1)>\r\nsecond line",  # a textarea's CRLF
        "headers": "source=console\nh=<i>",
        "partition": "1",
    }
    response = developer.post(URL, form)
    assert response.status_code == 302, response.content[:2000]
    assert "produced=1%3A4" in response["Location"]
    page = developer.get(response["Location"]).content.decode()
    assert "Produced a record to partition 1 at offset 4." in page
    assert offsets(page) == [(1, 4)]
    assert "&lt;img src=x onerror=alert(1)&gt;\nsecond line</pre>" in page
    assert "<img src=x" not in page
    assert '<dt>source</dt><dd><pre class="text">console</pre>' in page

    bad = developer.post(URL, {"value": "v", "headers": "no equals sign", "partition": "9"})
    assert bad.status_code == 422
    text = bad.content.decode()
    assert "line 1: write a header as name=value" in text
    assert "no equals sign" in text  # what was typed is kept


def test_the_brokers_refusal_and_absence_are_shown_plainly(
    orders: str, console_for: ConsoleFactory, auth_broker: BrokerProcess
) -> None:
    # A platform administrator sees every tenant's console pages, but the brokers let
    # them only describe a tenant's topics: reading is refused, with the user's token.
    admin = console_for(platform_admin=True)
    page = get(admin, "?partition=0")
    assert "the brokers refused your access to this topic" in page
    assert "TOPIC_AUTHORIZATION_FAILED" in page
    produced = admin.post(URL, {"value": "v"})
    assert produced.status_code == 422
    assert "The record was not produced" in produced.content.decode()

    globex = make_tenant("globex")
    other = console_for(roles={"globex": "developer"})
    assert other.get(URL).status_code == 404
    assert other.get(URL.replace("acme", "globex", 1)).status_code == 404
    assert globex.slug == "globex"

    auth_broker.kill()
    viewer = console_for(roles={"acme": "viewer"})
    down = get(viewer, "?partition=0")
    assert "the brokers did not answer in time; try again (BROKER_NOT_AVAILABLE)" in down
    assert auth_broker.address.rsplit(":", 1)[1] not in down.split("<main", 1)[1]


def test_a_page_stops_at_its_byte_cap_and_the_next_goes_on(
    orders: str, console_for: ConsoleFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(records, "PAGE_MAX_BYTES", 2000)
    client = console_for(roles={"acme": "viewer"})
    page = get(client, "?partition=0&mode=offset&offset=5&count=5")
    # Records 5 and 6 fit; the whole batch of record 7 (10 kB, larger than the cap on
    # its own) is still shown, as the brokers always send a fetch's first batch.
    assert offsets(page) == [(0, 5), (0, 6), (0, 7)]
    assert "This page stopped at 2.0\xa0KB fetched; the next page goes on from there." in page
    assert offsets(get(client, link(page, "next")))[0] == (0, 8)


def test_all_partitions_are_asked_at_once_and_a_large_batch_alone(
    orders: str, console_for: ConsoleFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Asked together, partition 1's first batch (10 kB) is more than its 4,000 bytes and
    # comes back empty; asked again alone, it comes whole.
    monkeypatch.setattr(records, "FETCH_MAX_BYTES", 4000)
    alone: list[tuple[int, int]] = []
    fetch = records.Reader._fetch

    def fetch_alone(reader: records.Reader, partition: int, offset: int, limit: int) -> Any:
        alone.append((partition, offset))
        return fetch(reader, partition, offset, limit)

    monkeypatch.setattr(records.Reader, "_fetch", fetch_alone)
    client = console_for(roles={"acme": "viewer"})
    page = get(client, "?partition=all&mode=offset&offset=0&count=4")
    assert offsets(page) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert (1, 0) in alone  # asked again alone
    assert (0, 0) not in alone  # came with the first round
    assert "x" * 4096 + "</pre>" in page
    assert offsets(get(client, link(page, "next"))) == [(0, 2), (0, 3), (1, 2), (1, 3)]


@pytest.mark.parametrize(
    "time", ["99999999999999999999999", "9999-12-31T23:59:59-05:00", "1969-12-31T23:59:59"]
)
def test_a_time_out_of_range_is_the_fields_error(
    time: str, orders: str, console_for: ConsoleFactory
) -> None:
    """A 23-digit time or one past year 9999 was an overflow (500); a time before 1970
    would reach the brokers as their 'latest' or 'earliest'. Each is the field's error."""
    client = console_for(roles={"acme": "viewer"})
    page = get(client, f"?partition=0&mode=timestamp&time={quote(time)}&count=3", status=422)
    assert "a time from 1970-01-01 to 9999-01-01 (UTC)" in page
