"""What the demo (``./dev run``) leaves on disk is its user's alone, even when started
with umask 000: the data directory, the database, the issuer's key-encryption key, the
internal clients' secrets, logs, queues and every broker's records."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from dataplane.local import free_ports
from tests.support.brokers import REPO_ROOT


def test_the_demo_writes_nothing_another_user_can_read(tmp_path: Path) -> None:
    (api_port,) = free_ports(1)
    data_dir = tmp_path / "demo"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MERIDIAN_", "DJANGO_"))}
    command = [sys.executable, "-m", "controlplane.demo", "--data-dir", str(data_dir)]
    command += ["--api-port", str(api_port), "--records", "100", "--exit"]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300,
        preexec_fn=lambda: os.umask(0),
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "consumed 100 with group demo.billing" in done.stdout
    paths = [data_dir, *data_dir.rglob("*")]
    readable = [
        f"{p.relative_to(data_dir)} {stat.filemode(p.lstat().st_mode)}"
        for p in paths
        if p.lstat().st_mode & 0o077
    ]
    assert readable == [], "readable or writable by others"
    names = {p.relative_to(data_dir).as_posix() for p in paths}
    assert {"controlplane.sqlite3", "secrets/local-issuer-kek", "brokers"} <= names
    for region in ("east", "west"):  # each region's brokers under their region
        assert any(n.startswith(f"brokers/{region}/main/broker-1/") for n in names), sorted(names)
    assert stat.S_IMODE(data_dir.stat().st_mode) == 0o700
    assert b"PRIVATE KEY" not in (data_dir / "controlplane.sqlite3").read_bytes()
