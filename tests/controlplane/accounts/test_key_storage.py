"""The local issuer's keys at rest, on the demo's storage path (its data directory, the
SQLite database, the issuer's key-encryption key and the internal clients' secret),
made by real processes under a permissive umask: every directory is 0700 and every
file holding data, a key or a secret 0600; the database holds no private key material
in clear; and after a restart on the same data directory, the issuer signs with the
same key and the API accepts its tokens.

The processes here set the umask themselves and are not the demo's ``main`` (which
narrows it to 077 for everything it starts): the components must be private alone."""

from __future__ import annotations

import base64
import json
import os
import sqlite3
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jwt
import pytest
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from dataplane.local import free_ports
from tests.support.brokers import REPO_ROOT

PREPARE = """
import json, os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
from controlplane import demo
platform = demo.Platform(demo.private_data_dir(Path(sys.argv[1])), 8000)
token = demo.prepare_database(platform)
from controlplane.accounts import internal
internal.local_internal_secret()
print(json.dumps({"token": token}))
"""

SERVE = """
import os, sys
from pathlib import Path
os.umask(int(sys.argv[2], 8))
from controlplane import demo
platform = demo.Platform(Path(sys.argv[1]), int(sys.argv[3]))
os.environ.update(platform.env())
import waitress
from controlplane.wsgi import application
waitress.serve(application, host="127.0.0.1", port=platform.api_port, threads=2)
"""


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("MERIDIAN_", "DJANGO_"))}


def _python(script: str, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=REPO_ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def _prepare(data_dir: Path, umask: int) -> str:
    """A platform-admin token from a fresh process on ``data_dir`` (as ``./dev run``
    makes before it starts anything)."""
    return str(json.loads(_python(PREPARE, str(data_dir), oct(umask)).splitlines()[-1])["token"])


def _get(url: str, token: str) -> tuple[int, Any]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


class Platform:
    def __init__(self, data_dir: Path, umask: int, first_token: str) -> None:
        self.data_dir = data_dir
        self.umask = umask
        self.first_token = first_token
        self.api: subprocess.Popen[bytes] | None = None
        self.api_url = ""

    def start_api(self) -> None:
        (port,) = free_ports(1)
        self.api_url = f"http://127.0.0.1:{port}/api/v1"
        args = [str(self.data_dir), oct(self.umask), str(port)]
        self.api = subprocess.Popen(
            [sys.executable, "-c", SERVE, *args], cwd=REPO_ROOT, env=_clean_env(),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            assert self.api.poll() is None, "the API server exited"
            try:
                urllib.request.urlopen(f"{self.api_url}/auth/jwks.json", timeout=10).close()
                return
            except OSError:  # not listening yet, or still loading
                time.sleep(0.1)
        raise AssertionError("the API did not answer within 60 s")

    def stop(self) -> None:
        if self.api is not None:
            self.api.terminate()
            self.api.wait(timeout=30)


@pytest.fixture(scope="module", params=[0o022, 0o000], ids=["umask022", "umask000"])
def platform(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Platform]:
    """A data directory prepared as the demo does, then an API server on it (a second
    process: a restart), all under ``umask``."""
    data_dir = tmp_path_factory.mktemp("umask") / "meridian"
    started = Platform(data_dir, request.param, _prepare(data_dir, request.param))
    started.start_api()
    try:
        yield started
    finally:
        started.stop()


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_directories_are_0700_and_files_with_keys_or_data_0600(platform: Platform) -> None:
    root = platform.data_dir
    assert _mode(root) == 0o700
    assert _mode(root / "secrets") == 0o700
    for path in (
        root / "controlplane.sqlite3",
        root / "secrets" / "local-issuer-kek",
        root / "secrets" / "internal-client-secret",
    ):
        assert _mode(path) == 0o600, path


def test_sqlites_own_files_are_0600_too(platform: Platform) -> None:
    """The write-ahead log and shared-memory files SQLite makes next to the database
    while a connection is open, here made by a process with umask 000."""
    previous = os.umask(0)
    try:
        with sqlite3.connect(platform.data_dir / "controlplane.sqlite3") as db:
            db.execute("SELECT count(*) FROM accounts_signingkey").fetchall()
            companions = [platform.data_dir / f"controlplane.sqlite3{s}" for s in ("-wal", "-shm")]
            assert [_mode(p) for p in companions] == [0o600, 0o600]
    finally:
        os.umask(previous)


def test_the_database_holds_no_private_key_in_clear(platform: Platform) -> None:
    sealed, kid = _stored_key(platform.data_dir)
    private = _unsealed(platform.data_dir, kid, sealed)
    numbers = private.private_numbers()
    der = private.private_bytes(
        serialization.Encoding.DER,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    secrets = [
        b"PRIVATE KEY",
        der,
        der[-64:],
        base64.b64encode(der)[-64:],
        numbers.d.to_bytes((numbers.d.bit_length() + 7) // 8, "big")[:32],
        numbers.p.to_bytes((numbers.p.bit_length() + 7) // 8, "big")[:32],
        str(numbers.d).encode()[:40],
    ]
    for path in platform.data_dir.glob("controlplane.sqlite3*"):
        content = path.read_bytes()
        found = [s[:16] for s in secrets if s in content]
        assert found == [], f"{path.name} holds private key material: {found}"


def test_after_a_restart_the_issuer_signs_with_the_same_key_and_the_api_accepts_it(
    platform: Platform,
) -> None:
    status, _ = _get(f"{platform.api_url}/regions", platform.first_token)
    assert status == 200, "a token issued before the restart"
    again = _prepare(platform.data_dir, platform.umask)  # a third process: signs again
    assert (
        jwt.get_unverified_header(again)["kid"]
        == jwt.get_unverified_header(platform.first_token)["kid"]
    )
    status, body = _get(f"{platform.api_url}/auth/whoami", again)
    assert status == 200, body
    _, jwks = _get(f"{platform.api_url}/auth/jwks.json", again)
    assert len(jwks["keys"]) == 1


def test_a_wrong_key_encryption_key_does_not_open_the_key(platform: Platform) -> None:
    sealed, kid = _stored_key(platform.data_dir)
    with pytest.raises(InvalidTag):
        _unsealed(platform.data_dir, kid, sealed, kek=AESGCM.generate_key(bit_length=256))
    with pytest.raises(InvalidTag):  # the key id is bound to the sealed key
        _unsealed(platform.data_dir, "another-kid", sealed)


def test_a_number_filter_out_of_range_is_400_on_sqlite(platform: Platform) -> None:
    """SQLite refuses integers past 64 bits with an OverflowError (a 500 before)."""
    for query in ("brokers?cluster=99999999999999999999", "drift-findings?broker=-1e30"):
        status, body = _get(f"{platform.api_url}/{query}", platform.first_token)
        assert status == 400, body
        assert body["error"]["code"] == "invalid"


UPGRADE = """
import os, sys
os.environ["DJANGO_SETTINGS_MODULE"] = "controlplane.settings"
os.environ["MERIDIAN_DATABASE_URL"] = "sqlite:///" + sys.argv[1]
os.environ["MERIDIAN_DATA_DIR"] = sys.argv[2]
import django
django.setup()
from django.core.management import call_command
from django.db import connection
call_command("migrate", "accounts", "0002", verbosity=0)
with connection.cursor() as cursor:
    # As SQLite builds without SQLITE_SECURE_DELETE do (this one may have it).
    cursor.execute("PRAGMA secure_delete = OFF")
    cursor.execute(
        "INSERT INTO accounts_signingkey (created_at, updated_at, kid, private_pem, active)"
        " VALUES (datetime('now'), datetime('now'), 'old', %s, 1)",
        [sys.argv[3]],
    )
call_command("migrate", verbosity=0)
"""


def test_a_key_stored_in_clear_before_is_retired_and_scrubbed_from_the_file(
    tmp_path: Path,
) -> None:
    """A database from before keys were sealed: its key may have been copied, so the
    migration retires it rather than sealing it, and SQLite's free pages and log no
    longer hold it."""
    old_pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    database = tmp_path / "controlplane.sqlite3"
    _python(UPGRADE, str(database), str(tmp_path / "data"), old_pem)
    with sqlite3.connect(database) as db:
        assert db.execute("SELECT count(*) FROM accounts_signingkey").fetchone() == (0,)
    body = old_pem.splitlines()[5].encode()  # a line of the key's base64 body
    for path in tmp_path.glob("controlplane.sqlite3*"):
        content = path.read_bytes()
        assert b"PRIVATE KEY" not in content, path.name
        assert body not in content, path.name


def _stored_key(data_dir: Path) -> tuple[str, str]:
    with sqlite3.connect(data_dir / "controlplane.sqlite3") as db:
        rows = db.execute("SELECT sealed_private_key, kid FROM accounts_signingkey").fetchall()
    assert len(rows) == 1
    return rows[0][0], rows[0][1]


def _unsealed(data_dir: Path, kid: str, sealed: str, kek: bytes | None = None) -> rsa.RSAPrivateKey:
    """What the issuer does, done here by hand: the key sealed with the KEK file."""
    kek = kek or base64.urlsafe_b64decode((data_dir / "secrets" / "local-issuer-kek").read_text())
    scheme, nonce, ciphertext = sealed.split(":")
    assert scheme == "aes256gcm"
    pem = AESGCM(kek).decrypt(
        base64.urlsafe_b64decode(nonce), base64.urlsafe_b64decode(ciphertext), kid.encode()
    )
    key = serialization.load_pem_private_key(pem, None)
    assert isinstance(key, rsa.RSAPrivateKey)
    return key
