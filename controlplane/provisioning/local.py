"""``LocalProvisioner``: a ``local`` cluster's brokers as processes on this host.

Broker ``N`` of cluster ``C`` in region ``R`` runs as
``python -m dataplane.broker --id N --data-dir <DATA_DIR>/R/C/broker-N
--listen 127.0.0.1:<port> --kafka-listen 127.0.0.1:<kafka port>
--peer M=127.0.0.1:<port of M> ... --region R --cluster-id C``; plus
``--remote-store-uri`` (and ``--remote-store-options-file``, a private file) when the
cluster has an object store (``remote_store_args``); with ``BROKER_AUTH``, the issuer's
JWKS, the broker client's credentials and the token endpoint its Kafka listener
exchanges SASL/PLAIN credentials at, and TLS flags when configured (``security_args``);
its ready file (``broker-N.ready``, JSON with its ``pid``, ``port`` and ``kafka_port``)
and its log (``broker-N.log``, stdout and stderr, appended) sit next to the data
directory. Ports, gRPC and Kafka, are chosen once, for every broker of the cluster
before any starts (each needs the others' addresses), and kept in the rows, so a
restarted broker comes back at the same addresses. Processes get a session of their
own: they outlive the controller that started them, which is how brokers keep serving
while no controller runs; the next controller finds them by pid.
They inherit the lifeline of ``./dev run`` when there is one (``dataplane/lifeline.py``),
so they stop with the demo however it ends.

Mirror worker ``W`` of region ``R`` (``MirrorWorkerSpec.name``, one per link and leg)
runs as ``python -m mirror --config <DATA_DIR>/R/mirrors/W/config.json --status-listen
127.0.0.1:0 --ready-file <DATA_DIR>/R/mirrors/W/ready.json`` with its log in
``<DATA_DIR>/R/mirrors/W.log``; its folder is ``0700``, its configuration (which names
the brokers of both regions) ``0600``, and the client secret its credentials name sits in
``secret`` beside it (``0600``), never in the configuration or on the command line. It
gets a session of its own and the lifeline, like a broker. Fencing: before a worker
starts, any earlier process of it (the pid the caller names, and the pid of its last
ready file) is sent SIGKILL and waited for until it is gone; a worker that cannot be
proven gone is not replaced (``MirrorWorkerError``). From the fence to the ready file
the starter holds an exclusive ``flock`` on the worker's folder, so two controllers on
one host (a deposed one and its successor) never both run a worker of one leg: the
second waits for the first's start to finish (``MIRROR_LOCK_TIMEOUT_S``), then fences
the process it started.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.conf import settings

import controlplane
from controlplane.accounts import internal
from controlplane.core.actors import Actor
from controlplane.core.private_files import private_dir, write_private
from controlplane.regions import services
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster
from controlplane.regions.provisioners import (
    MirrorWorkerError,
    MirrorWorkerProcess,
    MirrorWorkerSpec,
    ProvisioningError,
    RunningMirrorWorker,
)
from dataplane import lifeline

HOST = "127.0.0.1"
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0
MIRROR_READY_TIMEOUT_S = 30.0
# A stopping worker gets this long to flush after SIGTERM; then SIGKILL.
MIRROR_STOP_GRACE_S = 5.0
# How long a SIGKILLed process may take to vanish before the kill counts as failed.
KILL_CONFIRM_TIMEOUT_S = 10.0
# How long a start waits for another controller's start of the same worker: the longest
# that one can take (fence, then ready).
MIRROR_LOCK_TIMEOUT_S = KILL_CONFIRM_TIMEOUT_S + MIRROR_READY_TIMEOUT_S + 5.0
LOG_TAIL_BYTES = 4000
_SOURCE_ROOT = Path(controlplane.__file__).resolve().parents[1]


@dataclass(frozen=True)
class BrokerPaths:
    data_dir: Path
    ready_file: Path
    log_file: Path


@dataclass(frozen=True)
class MirrorPaths:
    data_dir: Path
    config_file: Path
    secret_file: Path
    ready_file: Path
    log_file: Path


class LocalProvisioner:
    """See the module docstring. Thread safety: one caller at a time (the controller)."""

    stopped_by_controller = False  # processes of this host: the deletion job stops them
    runs_mirror_workers = True

    def __init__(self, data_root: Path | str | None = None) -> None:
        self.data_root = Path(data_root or settings.DATA_DIR).resolve()
        self._children: dict[int, subprocess.Popen[bytes]] = {}  # pid -> process we started

    def paths(self, broker: Broker) -> BrokerPaths:
        cluster = broker.cluster
        base = self.data_root / cluster.region.name / cluster.name
        name = f"broker-{broker.broker_id}"
        return BrokerPaths(base / name, base / f"{name}.ready", base / f"{name}.log")

    # -- the Provisioner protocol ---------------------------------------------------------
    def ensure_broker(self, broker: Broker) -> None:
        self.ensure_brokers([broker])

    def ensure_brokers(self, brokers: Sequence[Broker]) -> None:
        for cluster in {broker.cluster for broker in brokers}:
            self._assign_ports(cluster)
        started = []
        for broker in brokers:
            broker.refresh_from_db(
                fields=["host", "port", "kafka_port", "pid", "data_dir", "phase"]
            )
            if broker.phase in (BrokerPhase.STOPPING, BrokerPhase.STOPPED):
                continue  # being stopped since the caller looked (a cluster deletion)
            if not self.is_running(broker):
                self._note_restart(broker)
                started.append((broker, self._launch(broker)))
        failures = [err for b, p in started if (err := self._wait_ready(b, p)) is not None]
        if failures:
            raise failures[0]

    def is_running(self, broker: Broker) -> bool:
        if broker.pid is None:
            return False
        child = self._children.get(broker.pid)
        if child is not None and child.poll() is not None:  # exited: reaped now
            del self._children[broker.pid]
            return False
        return _is_broker_process(broker.pid, self.paths(broker).data_dir)

    def stop_broker(self, broker: Broker, timeout_s: float = STOP_TIMEOUT_S) -> None:
        """SIGTERM and wait for a clean stop (SIGKILL after ``timeout_s``)."""
        if self.is_running(broker):
            assert broker.pid is not None
            services.set_broker_phase(broker, BrokerPhase.STOPPING, actor=_ACTOR)
            os.kill(broker.pid, signal.SIGTERM)
            if not self._wait_exit(broker, timeout_s):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(broker.pid, signal.SIGKILL)
                self._wait_exit(broker, 5.0)
        Broker.objects.filter(pk=broker.pk).update(pid=None)
        broker.pid = None
        services.set_broker_phase(broker, BrokerPhase.STOPPED, actor=_ACTOR)

    # -- mirror workers -------------------------------------------------------------------
    def mirror_paths(self, spec: MirrorWorkerSpec) -> MirrorPaths:
        base = self.data_root / spec.region / "mirrors"
        folder = base / spec.name
        return MirrorPaths(
            folder, folder / "config.json", folder / "secret", folder / "ready.json",
            base / f"{spec.name}.log",
        )  # fmt: skip

    def ensure_mirror_worker(
        self,
        spec: MirrorWorkerSpec,
        config: Mapping[str, Any],
        secret: str | None,
        previous: RunningMirrorWorker | None = None,
    ) -> MirrorWorkerProcess:
        paths = self.mirror_paths(spec)
        private_dir(paths.data_dir)
        with _folder_lock(spec.name, paths.data_dir):
            self._fence(spec.name, paths, previous)
            self._write_mirror_config(paths, config, secret)
            paths.ready_file.unlink(missing_ok=True)
            command = [sys.executable, "-m", "mirror", "--config", str(paths.config_file)]
            command += ["--status-listen", f"{HOST}:0", "--ready-file", str(paths.ready_file)]
            process = self._spawn(command, paths.log_file)
            return self._wait_mirror_ready(spec, paths, process)

    def stop_mirror_worker(self, worker: RunningMirrorWorker) -> None:
        """SIGTERM (a clean stop flushes what the worker holds), SIGKILL after
        ``MIRROR_STOP_GRACE_S``, and wait until the process is gone."""
        if not self.mirror_worker_running(worker):
            return
        assert worker.pid is not None
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGTERM)
        if not self._wait_gone(worker.pid, worker.data_dir, MIRROR_STOP_GRACE_S):
            self._kill_confirmed(Path(worker.data_dir).name, worker.pid, worker.data_dir)

    def mirror_worker_running(self, worker: RunningMirrorWorker) -> bool:
        if worker.pid is None or not worker.data_dir:
            return False
        self._reap(worker.pid)
        return _is_process_of(worker.pid, "mirror", Path(worker.data_dir))

    def _fence(self, name: str, paths: MirrorPaths, previous: RunningMirrorWorker | None) -> None:
        """Kill every earlier process of this worker and wait until each is gone."""
        pids = {previous.pid} if previous is not None and previous.pid else set()
        with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, ValueError):
            pids.add(int(json.loads(paths.ready_file.read_text())["pid"]))
        for pid in pids:
            self._kill_confirmed(name, pid, str(paths.data_dir))

    def _kill_confirmed(self, name: str, pid: int, data_dir: str) -> None:
        self._reap(pid)
        if not _is_process_of(pid, "mirror", Path(data_dir)):
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
        if not self._wait_gone(pid, data_dir, KILL_CONFIRM_TIMEOUT_S):
            raise MirrorWorkerError(name, f"pid {pid} still runs after SIGKILL: not replaced")

    def _wait_gone(self, pid: int, data_dir: str, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while True:
            self._reap(pid)
            if not _is_process_of(pid, "mirror", Path(data_dir)):
                return True
            if time.monotonic() > deadline:
                return False
            time.sleep(0.02)

    def _reap(self, pid: int) -> None:
        child = self._children.get(pid)
        if child is not None and child.poll() is not None:
            del self._children[pid]

    def _write_mirror_config(
        self, paths: MirrorPaths, config: Mapping[str, Any], secret: str | None
    ) -> None:
        document = dict(config)
        credentials = document.get("credentials")
        if secret is not None and isinstance(credentials, dict):
            write_private(paths.secret_file, secret.encode() + b"\n")
            document["credentials"] = {**credentials, "client_secret_file": str(paths.secret_file)}
        else:
            paths.secret_file.unlink(missing_ok=True)
        write_private(paths.config_file, json.dumps(document, indent=1).encode())

    def _wait_mirror_ready(
        self, spec: MirrorWorkerSpec, paths: MirrorPaths, process: subprocess.Popen[bytes]
    ) -> MirrorWorkerProcess:
        deadline = time.monotonic() + MIRROR_READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError, KeyError):
                ready = json.loads(paths.ready_file.read_text())
                if ready.get("pid") == process.pid:
                    port = int(ready["status_port"])
                    return MirrorWorkerProcess(process.pid, HOST, port, str(paths.data_dir))
            if process.poll() is not None:
                what = f"exited with {process.returncode} while starting"
                raise MirrorWorkerError(
                    spec.name, f"{what}; its log ends:\n{_tail(paths.log_file)}"
                )
            time.sleep(0.05)
        process.kill()
        process.wait()
        what = f"was not ready within {MIRROR_READY_TIMEOUT_S} s"
        raise MirrorWorkerError(spec.name, f"{what}; its log ends:\n{_tail(paths.log_file)}")

    # -- starting -------------------------------------------------------------------------
    def _assign_ports(self, cluster: Cluster) -> None:
        """Give every broker of ``cluster`` without a gRPC or a Kafka port one that is
        free now (all drawn at once, so no two are the same)."""
        no_port = list(cluster.brokers.filter(port__isnull=True))
        no_kafka_port = list(cluster.brokers.filter(kafka_port__isnull=True))
        ports = iter(_free_ports(len(no_port) + len(no_kafka_port)))
        for broker in no_port:
            Broker.objects.filter(pk=broker.pk, port__isnull=True).update(
                host=HOST, port=next(ports)
            )
        for broker in no_kafka_port:
            Broker.objects.filter(pk=broker.pk, kafka_port__isnull=True).update(
                kafka_port=next(ports)
            )

    def command(self, broker: Broker) -> list[str]:
        cluster = broker.cluster
        paths = self.paths(broker)
        args = [sys.executable, "-m", "dataplane.broker", "--id", str(broker.broker_id)]
        args += ["--data-dir", str(paths.data_dir), "--listen", f"{HOST}:{broker.port}"]
        args += ["--kafka-listen", f"{HOST}:{broker.kafka_port}"]
        args += ["--region", cluster.region.name, "--cluster-id", cluster.name]
        args += ["--ready-file", str(paths.ready_file), "--metrics-listen", f"{HOST}:0"]
        for peer in cluster.brokers.exclude(pk=broker.pk).exclude(port__isnull=True):
            args += ["--peer", f"{peer.broker_id}={peer.host}:{peer.port}"]
        return args + self.remote_store_args(cluster) + self.security_args()

    def remote_store_args(self, cluster: Cluster) -> list[str]:
        """Tiered storage's object store: its URI, and its options (credentials) in a
        private file (``0600`` in a ``0700`` folder), never on the command line."""
        if not cluster.remote_store_uri:
            return []
        args = ["--remote-store-uri", cluster.remote_store_uri]
        path = self.remote_store_options_file(cluster)
        if cluster.remote_store_options:
            write_private(path, json.dumps(cluster.remote_store_options).encode())
            args += ["--remote-store-options-file", str(path)]
        else:  # cleared since an earlier start: no stale credentials left behind
            path.unlink(missing_ok=True)
        return args

    def remote_store_options_file(self, cluster: Cluster) -> Path:
        return self.data_root / "secrets" / f"remote-store-{cluster.pk}.json"

    def security_args(self) -> list[str]:
        """Authentication (``BROKER_AUTH``: the issuer's JWKS, the broker client's
        credentials for calls to peers, its secret in a 0600 file, and the token
        endpoint where the Kafka listener exchanges a service account's SASL/PLAIN
        client id and secret for a token) and TLS flags."""
        args: list[str] = []
        if settings.BROKER_AUTH:
            secret_file = self.data_root / "broker-client-secret"
            secret = internal.client_secret(internal.BROKER_CLIENT_ID)
            write_private(secret_file, secret.encode() + b"\n")
            args += ["--jwks-url", internal.jwks_url(), "--token-issuer", internal.issuer()]
            args += ["--token-audience", settings.TOKEN_AUDIENCE]
            args += ["--internal-role", settings.INTERNAL_ROLE]
            args += ["--token-url", internal.token_url()]
            args += ["--sasl-plain-token-url", internal.token_url()]
            args += ["--client-id", internal.BROKER_CLIENT_ID]
            args += ["--client-secret-file", str(secret_file)]
        if settings.BROKER_TLS_CERT_FILE:
            args += ["--tls-cert-file", settings.BROKER_TLS_CERT_FILE]
            args += ["--tls-key-file", settings.BROKER_TLS_KEY_FILE]
        if settings.BROKER_TLS_CA_FILE:
            args += ["--tls-ca-file", settings.BROKER_TLS_CA_FILE]
        return args

    def _note_restart(self, broker: Broker) -> None:
        if broker.phase in (BrokerPhase.READY, BrokerPhase.UNREACHABLE):
            reason = "its process was not running: restarting it"
            services.set_broker_phase(broker, BrokerPhase.STARTING, actor=_ACTOR, reason=reason)

    def _launch(self, broker: Broker) -> subprocess.Popen[bytes]:
        paths = self.paths(broker)
        private_dir(paths.data_dir)  # tenants' records: readable by this user only
        paths.ready_file.unlink(missing_ok=True)
        return self._spawn(self.command(broker), paths.log_file)

    def _spawn(self, command: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """``command`` in a session of its own with the lifeline, logging to
        ``log_path`` (appended); remembered so it is reaped."""
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        env["PYTHONPATH"] = os.pathsep.join(
            filter(None, [str(_SOURCE_ROOT), env.get("PYTHONPATH")])
        )
        private_dir(log_path.parent)
        with log_path.open("ab") as log_file:
            log_file.write(f"--- start: {' '.join(command)}\n".encode())
            log_file.flush()
            process = subprocess.Popen(
                command,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
                pass_fds=lifeline.pass_fds(),
            )
        self._children[process.pid] = process
        return process

    def _wait_ready(
        self, broker: Broker, process: subprocess.Popen[bytes]
    ) -> ProvisioningError | None:
        """Wait for the ready file naming ``process``; record the broker's process."""
        paths = self.paths(broker)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError, json.JSONDecodeError):
                ready = json.loads(paths.ready_file.read_text())
                if ready.get("pid") == process.pid:
                    services.record_broker_process(
                        broker,
                        host=HOST,
                        port=int(ready["port"]),
                        kafka_port=int(ready.get("kafka_port") or 0) or None,
                        pid=process.pid,
                        data_dir=str(paths.data_dir),
                    )
                    return None
            if process.poll() is not None:
                return self._failed(broker, f"exited with {process.returncode} while starting")
            time.sleep(0.05)
        process.kill()
        return self._failed(broker, f"was not ready within {READY_TIMEOUT_S} s")

    def _failed(self, broker: Broker, what: str) -> ProvisioningError:
        tail = _tail(self.paths(broker).log_file)
        return ProvisioningError(broker, f"{what}; its log ends:\n{tail}")

    def _wait_exit(self, broker: Broker, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not self.is_running(broker):
                return True
            time.sleep(0.05)
        return False


_ACTOR = Actor.system("provisioner")


def _is_broker_process(pid: int, data_dir: Path) -> bool:
    """Whether ``pid`` is a live (not zombie) broker process serving ``data_dir``; a pid
    reused by another program does not count."""
    return _is_process_of(pid, "dataplane.broker", data_dir)


def _is_process_of(pid: int, module: str, data_dir: Path) -> bool:
    """Whether ``pid`` is a live (not zombie) ``python -m module`` process whose command
    line names ``data_dir`` (a broker's data directory, a mirror worker's folder)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    except OSError:  # no /proc: trust the pid alone
        return _pid_alive(pid)
    folder = os.fsencode(data_dir)
    named = any(arg == folder or arg.startswith(folder + b"/") for arg in cmdline)
    return state != "Z" and os.fsencode(module) in cmdline and named


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free a moment ago on ``HOST``."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket()
            sock.bind((HOST, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


@contextlib.contextmanager
def _folder_lock(name: str, folder: Path) -> Iterator[None]:
    """An exclusive ``flock`` on ``folder`` (see the module docstring), waited for at
    most ``MIRROR_LOCK_TIMEOUT_S``; ``MirrorWorkerError`` when another starter keeps
    it longer."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        deadline = time.monotonic() + MIRROR_LOCK_TIMEOUT_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise MirrorWorkerError(name, "another controller is starting it") from None
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)  # closing the descriptor releases the lock


def _tail(path: Path) -> str:
    with contextlib.suppress(FileNotFoundError), path.open("rb") as file:
        file.seek(max(0, path.stat().st_size - LOG_TAIL_BYTES))
        return file.read().decode(errors="replace")
    return ""
