"""Removing a member or a service account calls the identity provider before the
database, outside any transaction: no row lock is held through the IdP's HTTP calls,
and an IdP failure changes nothing."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from controlplane.accounts import services
from controlplane.accounts.identity import LocalIdentity
from controlplane.accounts.models import ServiceAccount
from controlplane.core.actors import Actor
from controlplane.core.errors import Unavailable
from controlplane.tenants.models import Membership
from tests.controlplane.api_base import make_tenant

ADMIN = Actor.system("tests")


@pytest.fixture
def acme(transactional_db: None, local_identity: LocalIdentity) -> Any:
    return make_tenant("acme")


def test_the_idp_is_called_outside_any_transaction(
    acme: Any, local_identity: LocalIdentity, monkeypatch: pytest.MonkeyPatch
) -> None:
    account, _ = services.create_service_account(acme, name="ci-app", actor=ADMIN)
    member = services.invite_member(acme, username="alice", role="viewer", actor=ADMIN)
    seen: list[bool] = []
    for name in ("delete_service_account", "remove_member"):
        real = getattr(local_identity, name)

        def spy(*args: Any, real: Any = real, **kwargs: Any) -> Any:
            seen.append(connection.in_atomic_block)
            return real(*args, **kwargs)

        monkeypatch.setattr(local_identity, name, spy)
    services.delete_service_account(account, actor=ADMIN)
    services.remove_member(member, actor=ADMIN)
    assert seen == [False, False]
    assert not ServiceAccount.objects.filter(pk=account.pk).exists()
    assert not Membership.objects.filter(pk=member.pk).exists()


def test_an_idp_failure_deletes_nothing(
    acme: Any, local_identity: LocalIdentity, monkeypatch: pytest.MonkeyPatch
) -> None:
    account, _ = services.create_service_account(acme, name="ci-app", actor=ADMIN)
    member = services.invite_member(acme, username="alice", role="viewer", actor=ADMIN)

    def down(*args: Any, **kwargs: Any) -> None:
        raise Unavailable("identity provider: connection refused")

    monkeypatch.setattr(local_identity, "delete_service_account", down)
    monkeypatch.setattr(local_identity, "remove_member", down)
    with pytest.raises(Unavailable):
        services.delete_service_account(account, actor=ADMIN)
    with pytest.raises(Unavailable):
        services.remove_member(member, actor=ADMIN)
    assert ServiceAccount.objects.filter(pk=account.pk).exists()
    assert Membership.objects.filter(pk=member.pk).exists()
