"""The session's settings and scratch folder (no JVM started here)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from spark.session import session_config


def test_the_driver_is_pinned_to_loopback_in_local_mode_only() -> None:
    local = session_config("local[2]", memory="1g")
    assert local["spark.driver.host"] == local["spark.driver.bindAddress"] == "127.0.0.1"
    for cluster in ("spark://spark-master:7077", "yarn", "k8s://https://k8s:6443"):
        config = session_config(cluster, memory="1g")
        assert "spark.driver.host" not in config
        assert "spark.driver.bindAddress" not in config


def test_the_scratch_folder_is_removed_when_the_interpreter_exits() -> None:
    code = (
        "import os\n"
        "from spark.session import scratch_dir, session_config\n"
        "path = scratch_dir()\n"
        "assert session_config('local[1]', memory='1g')['spark.local.dir'] == path\n"
        "open(os.path.join(path, 'spill'), 'w').close()\n"
        "print(path)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    path = done.stdout.strip()
    assert path
    assert not os.path.exists(path)
