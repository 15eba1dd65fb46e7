"""Console page fixtures: a tenant ``acme`` (and ``globex``, another tenant) with a
ready cluster of broker rows, and ``console_for(roles=..., platform_admin=...)``, a
Django test client whose session holds an access token the local issuer signed for
exactly those claims — what sign-in leaves in the session."""

from __future__ import annotations

import re
from collections.abc import Callable

import pytest
from django.test import Client

from controlplane.accounts.identity import LocalIdentity
from controlplane.regions.models import Cluster
from controlplane.tenants.models import Tenant
from tests.controlplane.api_base import make_cluster
from tests.controlplane.conftest import local_identity, token_for
from tests.support.controlplane import make_tenant
from web.auth.session import ACCESS_TOKEN

__all__ = ["local_identity"]

ConsoleFactory = Callable[..., Client]


@pytest.fixture
def cluster_rows(db: None) -> Cluster:
    return make_cluster()


@pytest.fixture
def acme(cluster_rows: Cluster) -> Tenant:
    return make_tenant("acme", region=cluster_rows.region)


@pytest.fixture
def globex(cluster_rows: Cluster) -> Tenant:
    return make_tenant("globex", region=cluster_rows.region)


def signed_in_client(token: str) -> Client:
    client = Client()
    session = client.session
    session[ACCESS_TOKEN] = token
    session.save()
    return client


@pytest.fixture
def console_for(db: None, local_identity: LocalIdentity) -> ConsoleFactory:
    def make(**claims: object) -> Client:
        return signed_in_client(token_for(local_identity, **claims))  # type: ignore[arg-type]

    return make


def unmasked(page: bytes) -> bytes:
    """The page without its CSRF tokens, which Django masks anew in every response."""
    return re.sub(rb'name="csrfmiddlewaretoken" value="[^"]*"', b"", page)
