"""The demo's supervisor on real child processes, without the platform: a child that
exits while the demo runs is started again; once a stop signal has come, a child that
exits (it is being stopped) is not, and nothing says it was."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.demo import Platform, handle_stop_signals

QUITS = ("json.tool", "--no-such-option")  # python -m json.tool refuses it: exits non-zero


def _exited(platform: Platform, name: str) -> None:
    deadline = time.monotonic() + 30
    while platform.children[name].process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert platform.children[name].process.returncode not in (None, 0)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    platform = Platform(tmp_path, api_port=0)
    yield platform
    platform.stop()


def test_a_child_that_exits_while_the_demo_runs_is_restarted(
    platform: Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    platform.spawn("worker", *QUITS)
    first = platform.children["worker"].process
    _exited(platform, "worker")

    platform.supervise()

    assert platform.children["worker"].process is not first
    assert "worker exited with 2; restarting it" in capsys.readouterr().out


def test_no_child_is_restarted_once_a_stop_signal_came(
    platform: Platform, capsys: pytest.CaptureFixture[str]
) -> None:
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)}
    try:
        handle_stop_signals(platform)
        platform.spawn("worker", *QUITS)
        first = platform.children["worker"].process
        with pytest.raises(KeyboardInterrupt):
            signal.raise_signal(signal.SIGTERM)
        _exited(platform, "worker")  # as a child being stopped does, before the cleanup

        platform.supervise()
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)

    assert platform.stopping
    assert platform.children["worker"].process is first
    assert "restarting" not in capsys.readouterr().out
