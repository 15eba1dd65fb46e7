"""What differs between identity providers is asked of the provider: the endpoints the
brokers and clients use, the internal clients' secret and the controller's tokens."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.exceptions import ImproperlyConfigured

from controlplane.accounts import internal
from controlplane.accounts.identity import get_identity, reset_identity
from controlplane.accounts.local import LocalInternalTokens
from dataplane.client.auth import ClientCredentials


@pytest.fixture(autouse=True)
def fresh_identity() -> Iterator[None]:
    reset_identity()
    internal.reset_controller_tokens()
    yield
    reset_identity()
    internal.reset_controller_tokens()


def test_keycloak_endpoints_and_tokens_come_from_the_realm(settings) -> None:  # type: ignore[no-untyped-def]
    settings.IDENTITY_PROVIDER = "keycloak"
    settings.KEYCLOAK_URL, settings.KEYCLOAK_REALM = "http://idp.example:8080/", "acme"
    settings.CONTROLLER_CLIENT_SECRET = "from-settings"
    realm = "http://idp.example:8080/realms/acme"

    assert internal.token_url() == f"{realm}/protocol/openid-connect/token"
    assert internal.jwks_url() == f"{realm}/protocol/openid-connect/certs"
    assert internal.issuer() == realm
    assert internal.client_secret(internal.CONTROLLER_CLIENT_ID) == "from-settings"
    tokens = internal.controller_tokens()
    assert isinstance(tokens, ClientCredentials)
    assert (tokens.token_url, tokens.client_id) == (
        f"{realm}/protocol/openid-connect/token",
        internal.CONTROLLER_CLIENT_ID,
    )


def test_the_local_issuer_serves_its_own_endpoints_and_signs_in_process(settings, tmp_path) -> None:  # type: ignore[no-untyped-def]
    settings.IDENTITY_PROVIDER = "local"
    settings.API_BASE_URL = "http://api.example:8000/"
    settings.INTERNAL_CLIENT_SECRET_FILE = str(tmp_path / "secret")

    assert internal.token_url() == "http://api.example:8000/api/v1/auth/token"
    assert internal.jwks_url() == "http://api.example:8000/api/v1/auth/jwks.json"
    secret = internal.client_secret(internal.BROKER_CLIENT_ID)
    assert secret == internal.client_secret(internal.CONTROLLER_CLIENT_ID)
    assert (tmp_path / "secret").read_text().strip() == secret
    assert isinstance(internal.controller_tokens(), LocalInternalTokens)


def test_a_new_provider_gets_new_controller_tokens(settings) -> None:  # type: ignore[no-untyped-def]
    settings.IDENTITY_PROVIDER = "keycloak"
    settings.CONTROLLER_CLIENT_SECRET = "s"
    first = internal.controller_tokens()
    assert internal.controller_tokens() is first

    settings.KEYCLOAK_REALM = "another"

    assert internal.controller_tokens() is not first
    assert "/realms/another/" in internal.controller_tokens().token_url  # type: ignore[attr-defined]


def test_an_unknown_provider_is_a_configuration_error(settings) -> None:  # type: ignore[no-untyped-def]
    settings.IDENTITY_PROVIDER = "ldap"

    with pytest.raises(ImproperlyConfigured, match="ldap"):
        get_identity()
