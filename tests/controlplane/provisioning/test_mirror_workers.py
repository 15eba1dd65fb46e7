"""Provisioners run mirror workers: the local one as fenced processes (the previous
process of a worker proven dead before another starts), with its configuration and
secret in private files; the static one runs none and says why."""

from __future__ import annotations

import json
import os
import signal
import stat
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.provisioning.local import LocalProvisioner
from controlplane.provisioning.static import NO_MIRROR_WORKERS, StaticProvisioner
from controlplane.regions.provisioners import (
    MirrorWorkerError,
    MirrorWorkerProcess,
    MirrorWorkerSpec,
)

pytestmark = pytest.mark.processes


def config(generation: int) -> dict[str, Any]:
    """A worker's configuration whose brokers do not answer (it serves its status)."""
    return {
        "link": "acme/orders-west", "link_id": 7, "generation": generation,
        "from_region": "east", "to_region": "west",
        "source": {"bootstrap": ["127.0.0.1:9"], "tls_ca_file": None},
        "target": {"bootstrap": ["127.0.0.1:9"], "tls_ca_file": None},
        "credentials": {"token_url": "http://127.0.0.1:9/token", "client_id": "acme--mirror"},
        "topics": [{"source": "acme.orders", "target": "acme.orders", "partitions": [0]}],
        "start": {"position": "earliest"}, "checkpoints": {}, "checkpoint_interval_ms": 5000,
        "batch": {"max_records": 100, "max_bytes": 1048576, "linger_ms": 5},
    }  # fmt: skip


class Worker:
    """What the controller keeps of a started worker (a ``MirrorWorker`` row)."""

    def __init__(self, process: MirrorWorkerProcess) -> None:
        self.pid: int | None = process.pid
        self.data_dir = process.data_dir
        self.status_port = process.status_port


@pytest.fixture
def provisioner(tmp_path: Path) -> Iterator[LocalProvisioner]:
    local = LocalProvisioner(tmp_path / "data")
    yield local
    for child in list(local._children.values()):
        child.kill()
        child.wait()


def start(provisioner: LocalProvisioner, generation: int, previous: Worker | None = None) -> Worker:
    spec = MirrorWorkerSpec("west", "link-7-east-west", generation)
    return Worker(provisioner.ensure_mirror_worker(spec, config(generation), "s3cret", previous))


def read_status(port: int) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/status", timeout=5) as answer:
        return json.loads(answer.read())  # type: ignore[no-any-return]


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_local_worker_runs_with_private_files_and_serves_its_status(
    provisioner: LocalProvisioner,
) -> None:
    worker = start(provisioner, 1)
    folder = Path(worker.data_dir)
    assert folder == provisioner.data_root / "west" / "mirrors" / "link-7-east-west"
    written = json.loads((folder / "config.json").read_text())
    assert written["credentials"]["client_secret_file"] == str(folder / "secret")
    assert (folder / "secret").read_text().strip() == "s3cret"
    assert "s3cret" not in (folder / "config.json").read_text()
    assert (mode(folder), mode(folder / "config.json"), mode(folder / "secret")) == (
        0o700, 0o600, 0o600,
    )  # fmt: skip
    assert (folder.parent / "link-7-east-west.log").exists()
    assert provisioner.mirror_worker_running(worker)
    status = read_status(worker.status_port)
    assert (status["generation"], status["pid"]) == (1, worker.pid)


def test_a_stopped_worker_is_killed_and_gone_before_its_replacement_starts(
    provisioner: LocalProvisioner,
) -> None:
    first = start(provisioner, 1)
    assert first.pid is not None
    os.kill(first.pid, signal.SIGSTOP)  # hung: only SIGKILL ends it
    second = start(provisioner, 2, previous=first)
    assert second.pid != first.pid
    assert not provisioner.mirror_worker_running(first)
    assert provisioner.mirror_worker_running(second)
    assert read_status(second.status_port)["generation"] == 2


def test_the_worker_found_in_its_folder_is_fenced_even_when_the_caller_names_none(
    tmp_path: Path, provisioner: LocalProvisioner
) -> None:
    first = start(provisioner, 1)
    other = LocalProvisioner(tmp_path / "data")  # another controller process: no children
    second = Worker(
        other.ensure_mirror_worker(
            MirrorWorkerSpec("west", "link-7-east-west", 2),
            {**config(2), "credentials": None},
            None,
        )
    )
    try:
        assert not provisioner.mirror_worker_running(first)
        assert not (Path(second.data_dir) / "secret").exists()
    finally:
        other.stop_mirror_worker(second)


def test_stopping_a_worker_waits_until_it_is_gone(provisioner: LocalProvisioner) -> None:
    worker = start(provisioner, 1)
    provisioner.stop_mirror_worker(worker)
    assert not provisioner.mirror_worker_running(worker)
    provisioner.stop_mirror_worker(worker)  # idempotent


def test_the_static_provisioner_runs_no_worker_and_says_why() -> None:
    static = StaticProvisioner()
    with pytest.raises(MirrorWorkerError) as refused:
        static.ensure_mirror_worker(MirrorWorkerSpec("west", "link-7-east-west", 1), {}, None)
    assert refused.value.message == NO_MIRROR_WORKERS
    assert not static.mirror_worker_running(Worker(MirrorWorkerProcess(1, "", 0, "")))


def test_a_start_waits_for_another_starter_of_the_same_worker(
    provisioner: LocalProvisioner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's folder is locked from the fence to the ready file: a second
    controller on the host cannot fence or spawn meanwhile (no process is started)."""
    import fcntl

    from controlplane.provisioning import local

    monkeypatch.setattr(local, "MIRROR_LOCK_TIMEOUT_S", 0.1)
    spec = MirrorWorkerSpec("west", "link-7-east-west", 1)
    folder = provisioner.mirror_paths(spec).data_dir
    folder.mkdir(parents=True)
    held = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(MirrorWorkerError, match="another controller is starting it"):
            provisioner.ensure_mirror_worker(spec, config(1), "s3cret")
    finally:
        os.close(held)
    assert provisioner._children == {}
    assert not provisioner.mirror_paths(spec).config_file.exists()
