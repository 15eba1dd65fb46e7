"""``KubernetesProvisioner``: a ``kubernetes`` cluster's brokers as the pods of a
StatefulSet, which Kubernetes keeps running; the control plane sizes it and records
where each broker answers.

The StatefulSet and its headless Service are made by the region's Terraform module
(``terraform/modules/region``), one per cluster, both named ``broker-<cluster>`` in the
namespace ``MERIDIAN_KUBERNETES_NAMESPACE``; broker ``N`` is the pod of ordinal
``N - 1``, ``broker-<cluster>-<N-1>``, with the stable DNS name
``broker-<cluster>-<N-1>.broker-<cluster>.<namespace>.svc`` (the Service publishes
addresses of pods not ready yet, so peers resolve while starting), gRPC on
``MERIDIAN_KUBERNETES_BROKER_PORT`` (9092) and Kafka's protocol on
``MERIDIAN_KUBERNETES_KAFKA_PORT`` (9093). Each pod keeps its data on a volume of its
own (the StatefulSet's volume claim), so a broker restarted or rescheduled comes back
with its logs at the same name.

``ensure_brokers`` scales the StatefulSet (its ``scale`` subresource, a merge patch) up
to the highest wanted broker and records each broker's address at once: its DNS name is
known before its pod runs, and the controller's heartbeats say when it serves. It never
waits for a pod: a pod that cannot run (an image that cannot be pulled, a container in
a crash loop, a pod failed) is a ``ProvisioningError`` naming Kubernetes' reason, so the
broker shows it. It reads the brokers' phases and the cluster's status again first:
brokers stopping or stopped, and a cluster being deleted, are not scaled back up by a
caller that read them before. A StatefulSet removes its highest ordinals first:
``stop_broker`` scales down below a broker only when no broker above it is still wanted
(a cluster being deleted scales to zero) and returns: the broker is ``stopping`` until
its pod is gone, which a later call records (``stopped``); otherwise it leaves the pod
running and says why. Only the region's controller reaches the Kubernetes API of the
region's namespace (``stopped_by_controller``): it stops the brokers of a deleted
cluster on its ticks.

Terraform's module makes the StatefulSet without ``spec.replicas`` (Kubernetes starts it
at one): the replica count is the control plane's, changed here only. With the
StatefulSet's ``persistentVolumeClaimRetentionPolicy`` (``Delete`` when scaled down or
deleted), a broker scaled away loses its volume, so a broker or a cluster made again
under the same name starts empty.

A failure of the Kubernetes API (unreachable, a timeout while reading an answer, a
refusal, an answer that is not what the API documents) is a
``ClusterProvisioningError``: the cluster's problem, never one broker's.

Mirror workers are not run here, as for ``static`` clusters: a worker must be fenced
(the previous one proven gone before the next starts), which a Deployment's rolling
replacement does not promise; a link whose target region's clusters are ``kubernetes``
stays without workers, and its worker says so.

The Kubernetes API is called over HTTPS with the pod's service-account token and CA
(``MERIDIAN_KUBERNETES_API_URL``, default ``https://$KUBERNETES_SERVICE_HOST:
$KUBERNETES_SERVICE_PORT``; ``MERIDIAN_KUBERNETES_TOKEN_FILE`` and
``MERIDIAN_KUBERNETES_CA_FILE``, default the service account's mounted files), with a
timeout on every call (``MERIDIAN_KUBERNETES_TIMEOUT_S``, 10 s). The token is read
again for every call: Kubernetes rotates projected tokens. The control plane's service
account needs ``get`` and ``patch`` on ``statefulsets/scale`` and ``get`` on ``pods``
in the namespace (the module's Role grants exactly these).
"""

from __future__ import annotations

import http.client
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import requests
import urllib3

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.regions import services
from controlplane.regions.choices import BrokerPhase
from controlplane.regions.models import Broker, Cluster
from controlplane.regions.provisioners import (
    ClusterProvisioningError,
    MirrorWorkerError,
    MirrorWorkerProcess,
    MirrorWorkerSpec,
    ProvisioningError,
    RunningMirrorWorker,
)
from controlplane.settings.env import env

T = TypeVar("T")

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
# What the API answers is bounded: a pod or a scale object is a few KiB.
MAX_ANSWER_BYTES = 1 << 20
# Container states whose reason means the pod will not serve without someone acting.
FAILING_REASONS = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
    "CreateContainerConfigError", "CreateContainerError", "RunContainerError",
})  # fmt: skip
# A call that fails on the way: requests' own errors, and those a streamed body's read
# raises itself (urllib3's timeouts, protocol and decoding errors; http.client's short
# reads; sockets' and TLS's OSErrors).
TRANSPORT_ERRORS = (
    requests.RequestException, urllib3.exceptions.HTTPError, http.client.HTTPException, OSError,
)  # fmt: skip
NO_MIRROR_WORKERS = (
    "the region's clusters run on Kubernetes: the control plane starts no mirror workers "
    "there (a worker must be fenced, its predecessor proven gone, which a Deployment's "
    "replacement does not promise); run the target region's clusters with the local "
    "provisioner"
)
_ACTOR = Actor.system("provisioner")
_STOPPED_OR_STOPPING = (BrokerPhase.STOPPING, BrokerPhase.STOPPED)


class KubernetesError(Exception):
    """The Kubernetes API refused a call, could not be reached, or answered what it does
    not answer."""


@dataclass(frozen=True)
class KubernetesConfig:
    api_url: str
    token_file: Path
    ca_file: Path | None
    namespace: str
    broker_port: int
    kafka_port: int
    timeout_s: float

    @classmethod
    def from_environment(cls) -> KubernetesConfig:
        """The ``MERIDIAN_KUBERNETES_*`` variables (module docstring), with in-cluster
        defaults."""
        host = os.environ.get("KUBERNETES_SERVICE_HOST", "")
        port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
        default_url = f"https://{host}:{port}" if host else ""
        default_ca = SERVICE_ACCOUNT_DIR / "ca.crt"
        ca = env("MERIDIAN_KUBERNETES_CA_FILE", str(default_ca) if default_ca.exists() else "")
        return cls(
            api_url=env("MERIDIAN_KUBERNETES_API_URL", default_url).rstrip("/"),
            token_file=Path(
                env("MERIDIAN_KUBERNETES_TOKEN_FILE", str(SERVICE_ACCOUNT_DIR / "token"))
            ),
            ca_file=Path(ca) if ca else None,
            namespace=env("MERIDIAN_KUBERNETES_NAMESPACE", "meridian"),
            broker_port=env("MERIDIAN_KUBERNETES_BROKER_PORT", 9092, int),
            kafka_port=env("MERIDIAN_KUBERNETES_KAFKA_PORT", 9093, int),
            timeout_s=env("MERIDIAN_KUBERNETES_TIMEOUT_S", 10.0, float),
        )


class KubernetesApi:
    """The few calls of the Kubernetes REST API the provisioner makes. Every failure of a
    call, reading its answer included, is a ``KubernetesError``."""

    def __init__(self, config: KubernetesConfig) -> None:
        if not config.api_url:
            raise KubernetesError(
                "no Kubernetes API: set MERIDIAN_KUBERNETES_API_URL, or run in a pod "
                "(KUBERNETES_SERVICE_HOST)"
            )
        self.config = config
        self.session = requests.Session()
        # Passed with each call: a session's own `verify` yields to $REQUESTS_CA_BUNDLE.
        self.verify: str | bool = str(config.ca_file) if config.ca_file else True

    def get(self, path: str) -> dict[str, Any] | None:
        """The object at ``path``; None when it does not exist (404)."""
        return self._call("GET", path, None)

    def merge_patch(self, path: str, body: Mapping[str, Any]) -> dict[str, Any] | None:
        return self._call("PATCH", path, body)

    def _call(
        self, method: str, path: str, body: Mapping[str, Any] | None
    ) -> dict[str, Any] | None:
        headers = {"Authorization": f"Bearer {self._token()}", "Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = "application/merge-patch+json"
        url = self.config.api_url + path
        try:
            with self.session.request(
                method, url, json=body, headers=headers, timeout=self.config.timeout_s,
                stream=True, verify=self.verify,
            ) as response:  # fmt: skip
                raw = response.raw.read(MAX_ANSWER_BYTES + 1, decode_content=True)
        except TRANSPORT_ERRORS as exc:
            raise KubernetesError(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        if len(raw) > MAX_ANSWER_BYTES:
            raise KubernetesError(f"{method} {path}: the answer is over {MAX_ANSWER_BYTES} bytes")
        if response.status_code == 404:
            return None
        if not response.ok:
            text = raw[:500].decode(errors="replace")
            raise KubernetesError(f"{method} {path}: {response.status_code} {text}")
        try:
            answer = json.loads(raw) if raw else {}
        except (ValueError, RecursionError) as exc:
            raise KubernetesError(f"{method} {path}: the answer is not JSON") from exc
        if not isinstance(answer, dict):
            raise KubernetesError(f"{method} {path}: the answer is not a JSON object")
        return answer

    def _token(self) -> str:
        try:
            return self.config.token_file.read_text().strip()
        except (OSError, ValueError) as exc:
            raise KubernetesError(
                f"the service-account token {self.config.token_file}: {exc}"
            ) from exc


def statefulset_name(cluster: Cluster) -> str:
    """The StatefulSet (and headless Service) of a cluster's brokers."""
    return f"broker-{cluster.name}"


def pod_name(broker: Broker) -> str:
    return f"{statefulset_name(broker.cluster)}-{broker.broker_id - 1}"


class KubernetesProvisioner:
    """See the module docstring. Thread safety: one caller at a time (the controller)."""

    stopped_by_controller = True  # the Kubernetes API is reached from the region only
    runs_mirror_workers = False

    def __init__(self, config: KubernetesConfig | None = None) -> None:
        self.config = config or KubernetesConfig.from_environment()
        self._api: KubernetesApi | None = None

    @property
    def api(self) -> KubernetesApi:
        if self._api is None:  # made on first use: Django starts without a cluster
            self._api = KubernetesApi(self.config)
        return self._api

    def host(self, broker: Broker) -> str:
        """The broker's stable DNS name."""
        service = statefulset_name(broker.cluster)
        return f"{pod_name(broker)}.{service}.{self.config.namespace}.svc"

    # -- the Provisioner protocol ---------------------------------------------------------
    def ensure_broker(self, broker: Broker) -> None:
        self.ensure_brokers([broker])

    def ensure_brokers(self, brokers: Sequence[Broker]) -> None:
        failures: list[ProvisioningError] = []
        by_cluster: dict[int, list[Broker]] = {}
        for broker in brokers:
            by_cluster.setdefault(broker.cluster_id, []).append(broker)
        for members in by_cluster.values():
            cluster = members[0].cluster
            cluster.refresh_from_db(fields=["status"])
            if cluster.status == ProvisioningStatus.DELETING:
                continue  # being deleted since the caller looked: scaled down, not up
            for broker in members:
                broker.refresh_from_db(fields=["phase", "host", "port", "kafka_port"])
            wanted = [b for b in members if b.phase not in _STOPPED_OR_STOPPING]
            if not wanted:
                continue
            top = max(b.broker_id for b in wanted)
            self._cluster_call(cluster, self._scale_at_least, cluster, top)
            failures += [p for b in wanted if (p := self._record(b)) is not None]
        if failures:
            raise failures[0]

    def is_running(self, broker: Broker) -> bool:
        pod = self._cluster_call(broker.cluster, self._pod, broker)
        return pod is not None and self._cluster_call(broker.cluster, _runs, pod)

    def stop_broker(self, broker: Broker) -> None:
        """Scale below the broker when no broker above it is wanted, and return; it is
        ``stopped`` once its pod is gone (this call or a later one: module docstring)."""
        cluster = broker.cluster
        broker.refresh_from_db(fields=["phase"])
        cluster.refresh_from_db(fields=["status"])
        if broker.phase == BrokerPhase.STOPPED:
            return
        deleting = cluster.status == ProvisioningStatus.DELETING
        keep = 0 if deleting else _wanted_replicas(cluster, broker)
        if broker.broker_id <= keep:
            raise ProvisioningError(
                broker,
                f"brokers above it are still wanted and a StatefulSet removes its highest "
                f"ordinals first: its pod {pod_name(broker)} keeps running (holding "
                "nothing) until they stop",
            )
        self._cluster_call(cluster, self._scale_down_to, cluster, keep)
        if self._cluster_call(cluster, self._pod, broker) is None:
            services.set_broker_phase(broker, BrokerPhase.STOPPED, actor=_ACTOR)
        else:
            reason = f"waiting for its pod {pod_name(broker)} to terminate"
            services.set_broker_phase(broker, BrokerPhase.STOPPING, actor=_ACTOR, reason=reason)

    # -- mirror workers -------------------------------------------------------------------
    def ensure_mirror_worker(
        self,
        spec: MirrorWorkerSpec,
        config: Mapping[str, Any],
        secret: str | None,
        previous: RunningMirrorWorker | None = None,
    ) -> MirrorWorkerProcess:
        raise MirrorWorkerError(spec.name, NO_MIRROR_WORKERS)

    def stop_mirror_worker(self, worker: RunningMirrorWorker) -> None:
        """Nothing runs here."""

    def mirror_worker_running(self, worker: RunningMirrorWorker) -> bool:
        return False

    # -- the API --------------------------------------------------------------------------
    def _cluster_call(self, cluster: Cluster, call: Callable[..., T], *args: Any) -> T:
        """``call(*args)``, a failure of the Kubernetes API being the cluster's."""
        try:
            return call(*args)
        except KubernetesError as exc:
            raise ClusterProvisioningError(cluster, str(exc)) from exc

    def _scale_path(self, cluster: Cluster) -> str:
        name = statefulset_name(cluster)
        return f"/apis/apps/v1/namespaces/{self.config.namespace}/statefulsets/{name}/scale"

    def _replicas(self, cluster: Cluster) -> int | None:
        """The StatefulSet's replica count; None when there is no StatefulSet."""
        scale = self.api.get(self._scale_path(cluster))
        if scale is None:
            return None
        spec = _field(scale, "spec", dict, "a Scale")
        if spec is None:
            raise KubernetesError(f"not a Scale: {str(scale)[:200]}")
        # A Scale leaves out replicas when they are zero.
        replicas = _field(spec, "replicas", int, "a Scale's spec") or 0
        if isinstance(replicas, bool) or replicas < 0:
            raise KubernetesError(f"a Scale's spec.replicas is {replicas!r}")
        return replicas

    def _scale_at_least(self, cluster: Cluster, replicas: int) -> None:
        current = self._replicas(cluster)
        if current is None:
            raise KubernetesError(
                f"no StatefulSet {statefulset_name(cluster)} in namespace "
                f"{self.config.namespace} (terraform/modules/region makes it)"
            )
        if current < replicas:
            self.api.merge_patch(self._scale_path(cluster), {"spec": {"replicas": replicas}})

    def _scale_down_to(self, cluster: Cluster, replicas: int) -> None:
        """Down to ``replicas``; without a StatefulSet nothing runs, nothing to do."""
        current = self._replicas(cluster)
        if current is not None and current > replicas:
            self.api.merge_patch(self._scale_path(cluster), {"spec": {"replicas": replicas}})

    def _pod(self, broker: Broker) -> dict[str, Any] | None:
        return self.api.get(f"/api/v1/namespaces/{self.config.namespace}/pods/{pod_name(broker)}")

    def _record(self, broker: Broker) -> ProvisioningError | None:
        """Record the broker's address (once); a ``ProvisioningError`` when its pod is
        failing."""
        if broker.host != self.host(broker) or broker.port != self.config.broker_port:
            services.record_broker_process(
                broker, host=self.host(broker), port=self.config.broker_port,
                kafka_port=self.config.kafka_port, pid=None, data_dir="",
            )  # fmt: skip
        pod = self._cluster_call(broker.cluster, self._pod, broker)
        reason = self._cluster_call(broker.cluster, _failing, pod) if pod is not None else None
        return (
            None
            if reason is None
            else ProvisioningError(broker, f"pod {pod_name(broker)}: {reason}")
        )


def _wanted_replicas(cluster: Cluster, stopping: Broker) -> int:
    """One past the highest ordinal of the cluster's brokers still wanted running."""
    gone = (BrokerPhase.STOPPING, BrokerPhase.STOPPED, BrokerPhase.DECOMMISSIONED)
    wanted = cluster.brokers.exclude(pk=stopping.pk).exclude(phase__in=gone)
    return max(wanted.values_list("broker_id", flat=True), default=0)


def _field(obj: Mapping[str, Any], key: str, kind: type[T], what: str) -> T | None:
    """``obj[key]`` when it is a ``kind``; None when it is absent or null; a
    ``KubernetesError`` when it is something else (not what the API documents)."""
    value = obj.get(key)
    if value is None or isinstance(value, kind):
        return value
    raise KubernetesError(f"{what}'s {key} is not a {kind.__name__}: {str(value)[:100]!r}")


def _container_states(pod: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each container's name and state, from the pod's status."""
    status = _field(pod, "status", dict, "a pod") or {}
    found = []
    for container in _field(status, "containerStatuses", list, "a pod's status") or []:
        if not isinstance(container, dict):
            raise KubernetesError(f"a pod's container status is not an object: {container!r}")
        name = _field(container, "name", str, "a container status") or ""
        found.append((name, _field(container, "state", dict, "a container status") or {}))
    return found


def _runs(pod: Mapping[str, Any]) -> bool:
    metadata = _field(pod, "metadata", dict, "a pod") or {}
    status = _field(pod, "status", dict, "a pod") or {}
    states = _container_states(pod)
    if metadata.get("deletionTimestamp") or status.get("phase") != "Running":
        return False
    return any("running" in state for _, state in states)


def _failing(pod: Mapping[str, Any]) -> str | None:
    """Why the pod will not serve without someone acting (None: it runs or is starting)."""
    status = _field(pod, "status", dict, "a pod") or {}
    if status.get("phase") == "Failed":
        return f"failed: {status.get('reason') or ''} {status.get('message') or ''}".strip()
    for name, state in _container_states(pod):
        waiting = _field(state, "waiting", dict, "a container state") or {}
        reason = _field(waiting, "reason", str, "a waiting state")
        if reason in FAILING_REASONS:
            message = _field(waiting, "message", str, "a waiting state") or ""
            return f"container {name}: {reason} {message}".strip()
    return None
