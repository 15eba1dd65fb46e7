"""The message browser under a topic's ACLs, pushed to a real authenticating broker by a
real controller tick: the console reads and produces with the user's own token, so the
broker's ACL decides, and its refusal is shown as a plain message."""

from __future__ import annotations

import uuid

from controlplane.controller.controller import Controller
from controlplane.core.actors import Actor
from controlplane.topics.acls import grant_topic_acl
from controlplane.topics.models import Topic
from tests.controlplane.accounts.test_broker_auth import api_url, broker_auth
from tests.controlplane.topics.test_acl_brokers import served_topic
from tests.support.brokers import BrokerProcess
from tests.web.pages.conftest import ConsoleFactory

__all__ = ["api_url", "broker_auth", "served_topic"]  # fixtures this module uses

URL = "/console/t/acme/topics/acme.orders/messages/"


def _subject(username: str) -> str:
    """The subject ``token_for`` gives ``username``'s tokens."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, username))


def test_the_topics_acls_decide_what_a_developer_reads_and_produces(
    served_topic: tuple[Topic, BrokerProcess, Controller], console_for: ConsoleFactory
) -> None:
    topic, _, controller = served_topic
    grant_topic_acl(
        topic, principal=_subject("reader"), operations=["consume"], actor=Actor.system("t")
    )
    controller.tick()  # leaders elected; the entry pushed to the broker

    reader = console_for(roles={"acme": "developer"}, username="reader")
    page = reader.get(URL + "?partition=0").content.decode()
    assert "Cannot read this topic" not in page
    assert "No records here." in page
    refused = reader.post(URL, {"value": "hello"})
    assert refused.status_code == 422
    text = refused.content.decode()
    assert "The record was not produced: the brokers refused your access to this topic" in text
    assert "TOPIC_AUTHORIZATION_FAILED" in text

    outsider = console_for(roles={"acme": "developer"}, username="outsider")
    page = outsider.get(URL + "?partition=0").content.decode()
    assert "Cannot read this topic: the brokers refused your access to this topic" in page
    assert "ACLs do not allow it) (TOPIC_AUTHORIZATION_FAILED)" in page
