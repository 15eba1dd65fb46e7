"""Tenants reach the identity provider through the protocol they own; the accounts app
installs the configured provider there when Django starts."""

from __future__ import annotations

from controlplane.accounts.identity import get_identity, reset_identity
from controlplane.tenants.identity import tenant_identity


def test_tenants_use_the_configured_provider() -> None:
    assert tenant_identity() is get_identity()


def test_a_provider_change_reaches_tenants() -> None:
    before = tenant_identity()
    reset_identity()
    try:
        assert tenant_identity() is not before  # built anew, never a stale copy
        assert tenant_identity() is get_identity()
    finally:
        reset_identity()
