"""An S3 endpoint for tests: moto's server on 127.0.0.1, in a process of its own.

``S3Endpoint(port).start()`` runs ``moto_server`` (installed with the dev extras) and
returns once it answers; ``bucket()`` creates a fresh, empty bucket and returns the
``(uri, options)`` pair ``ObjectStore.open`` takes, with the credentials and endpoint of
this server. The server dies with the process that started it (``PR_SET_PDEATHSIG``), so
a test run killed half-way leaves none behind; ``stop()`` kills it at once (tests of a
store that stops answering call it too).

The session's shared endpoint is the ``s3_store_uri`` fixture (``tests/conftest.py``).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import s3fs

from dataplane.local import free_ports

READY_TIMEOUT_S = 60.0
_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child, before exec: SIGKILL when the parent goes, however it goes."""
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class S3Endpoint:
    """One moto server; see the module docstring."""

    def __init__(self, port: int | None = None, log_path: Path | None = None) -> None:
        self.port = port or free_ports(1)[0]
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None
        self._buckets = itertools.count(1)

    @property
    def endpoint_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def options(self) -> dict[str, Any]:
        """The filesystem options (s3fs) that reach this server."""
        return {
            "key": "test",
            "secret": "test",
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": "us-east-1"},
        }

    def start(self) -> S3Endpoint:
        server = Path(sys.executable).parent / "moto_server"
        command = [str(server)] if server.exists() else [sys.executable, "-m", "moto.server"]
        with open(self.log_path or os.devnull, "ab") as output:
            self.process = subprocess.Popen(
                [*command, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=output,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                preexec_fn=_die_with_parent,
            )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        assert self.process is not None
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"moto_server exited with {self.process.returncode}")
            try:
                with urllib.request.urlopen(f"{self.endpoint_url}/moto-api/", timeout=1):
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"moto_server did not answer on port {self.port}")

    def bucket(self) -> tuple[str, dict[str, Any]]:
        """A new empty bucket: ``(uri, options)`` for ``ObjectStore.open``."""
        name = f"tier-test-{next(self._buckets)}"
        fs = s3fs.S3FileSystem(**self.options)
        fs.call_s3("create_bucket", Bucket=name)  # us-east-1 takes no LocationConstraint
        return f"s3://{name}", self.options

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def __repr__(self) -> str:
        return f"S3Endpoint({self.endpoint_url})"
