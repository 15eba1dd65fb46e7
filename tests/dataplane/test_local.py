"""``dataplane.local``: brokers started by a launcher stop when it ends, however it ends
(a SIGKILL leaves it no chance to clean up): they hold its lifeline."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from tests.support.brokers import REPO_ROOT

LAUNCHER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from dataplane.local import LocalCluster
    cluster = LocalCluster(Path(sys.argv[1]), 2, kafka=True).start()
    print(" ".join(str(b.pid) for b in cluster.brokers), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_brokers_stop_when_their_launcher_is_killed(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", LAUNCHER, str(tmp_path)],
        cwd=REPO_ROOT,
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -9, done.stderr.decode(errors="replace")
    pids = [int(pid) for pid in done.stdout.split()]
    assert len(pids) == 2
    deadline = time.monotonic() + 30
    while any(_alive(pid) for pid in pids):
        assert time.monotonic() < deadline, f"brokers {pids} outlived their launcher"
        time.sleep(0.1)
    # They stopped cleanly (SIGTERM from their lifeline): each log says so.
    logs = [path.read_text() for path in sorted(tmp_path.glob("broker-*.log"))]
    assert len(logs) == 2
    for number, text in enumerate(logs, start=1):
        assert f"broker {number} stopped" in text, text[-3000:]
