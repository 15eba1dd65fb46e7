"""The broker's authentication and TLS settings: flags, file keys and their checks."""

from __future__ import annotations

from pathlib import Path

import pytest

from dataplane.broker.config import ConfigError, load_config
from dataplane.broker.main import config_from_args, parse_args


def test_flags_set_the_auth_and_tls_settings(tmp_path: Path) -> None:
    args = parse_args(
        [
            "--id", "1", "--data-dir", str(tmp_path),
            "--jwks-url", "http://issuer/jwks", "--token-issuer", "http://issuer",
            "--token-url", "http://issuer/token", "--client-id", "meridian-broker",
            "--client-secret-file", "/run/secret",
            "--tls-cert-file", "/c.pem", "--tls-key-file", "/k.pem", "--tls-ca-file", "/ca.pem",
        ]
    )  # fmt: skip
    config = config_from_args(args)
    assert config.auth_enabled
    assert config.tls_enabled
    assert (config.token_issuer, config.token_audience) == ("http://issuer", "meridian")
    assert config.internal_role == "meridian-internal"
    assert (config.client_id, config.client_secret_file) == ("meridian-broker", "/run/secret")


def test_auth_is_off_without_a_jwks_url(tmp_path: Path) -> None:
    config = load_config(broker_id=1, data_dir=tmp_path)
    assert not config.auth_enabled
    assert not config.tls_enabled


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"jwks_url": "http://issuer/jwks"}, "token_issuer"),
        ({"jwks_url": "file:///etc/jwks.json", "token_issuer": "i"}, "jwks_url"),
        ({"token_url": "http://issuer/token", "client_id": "b"}, "token_url"),
        ({"tls_cert_file": "/c.pem"}, "tls_cert_file"),
        ({"tls_key_file": "/k.pem"}, "tls_cert_file"),
    ],
)
def test_incomplete_settings_are_refused(
    tmp_path: Path, settings: dict[str, str], field: str
) -> None:
    with pytest.raises(ConfigError, match=field):
        load_config(broker_id=1, data_dir=tmp_path, **settings)


def test_a_config_file_names_them_too(tmp_path: Path) -> None:
    path = tmp_path / "broker.toml"
    path.write_text(
        'id = 3\ndata_dir = "data"\njwks_url = "http://i/jwks"\ntoken_issuer = "http://i"\n'
    )
    assert load_config(path).jwks_url == "http://i/jwks"
