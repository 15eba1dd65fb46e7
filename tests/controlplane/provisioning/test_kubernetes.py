"""The Kubernetes provisioner against a stand-in for the Kubernetes API server
(``tests.support.kubernetes_api``, over a real socket; Kubernetes cannot run here): it
sizes the cluster's StatefulSet, records each broker's stable DNS name, reports a pod
that cannot run, scales down only from the top without waiting for pods to go,
authenticates with the rotating token and the cluster's CA, blames a failing or
misbehaving API on the cluster and never on a broker, leaves brokers being stopped
alone, and runs no mirror workers; the region's controller deletes a cluster on its
ticks (the deletion job, in a Celery worker, cannot reach the API)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from controlplane.controller.controller import Controller
from controlplane.controller.lease import FileLease
from controlplane.controller.push import MetadataPusher
from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.provisioning.kubernetes import (
    NO_MIRROR_WORKERS,
    KubernetesConfig,
    KubernetesProvisioner,
)
from controlplane.regions import services, tasks, teardown
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.models import Broker, Cluster
from controlplane.regions.provisioners import (
    ClusterProvisioningError,
    MirrorWorkerError,
    MirrorWorkerSpec,
    ProvisioningError,
    get_provisioner,
)
from tests.support.kubernetes_api import FakeKubernetes, Request, waiting
from tests.support.tls import make_tls_files

NAMESPACE = "meridian-test"
ACTOR = Actor.system("test")


@pytest.fixture
def cluster(db: None) -> Cluster:
    region = services.create_region(name="eu-west", actor=ACTOR)
    return services.create_cluster(
        region, name="main", provisioner=ProvisionerKind.KUBERNETES, broker_count=3, actor=ACTOR
    )


@pytest.fixture
def token_file(tmp_path: Path) -> Path:
    path = tmp_path / "token"
    path.write_text("token-1\n")
    return path


@pytest.fixture
def k8s() -> Iterator[FakeKubernetes]:
    fake = FakeKubernetes(namespace=NAMESPACE, token="token-1", statefulsets={"broker-main": 0})
    with fake.serving():
        yield fake


def provisioner_for(
    fake: FakeKubernetes, token_file: Path, ca_file: Path | None = None, timeout_s: float = 5.0
) -> KubernetesProvisioner:
    config = KubernetesConfig(
        api_url=fake.url, token_file=token_file, ca_file=ca_file, namespace=NAMESPACE,
        broker_port=9092, kafka_port=9093, timeout_s=timeout_s,
    )  # fmt: skip
    return KubernetesProvisioner(config)


def brokers(cluster: Cluster) -> list[Broker]:
    return list(cluster.brokers.order_by("broker_id"))


def test_kubernetes_clusters_get_the_kubernetes_provisioner(cluster: Cluster) -> None:
    assert isinstance(get_provisioner(cluster), KubernetesProvisioner)


def test_ensure_brokers_sizes_the_statefulset_and_records_stable_names(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    provisioner = provisioner_for(k8s, token_file)
    provisioner.ensure_brokers(brokers(cluster))

    assert k8s.statefulsets["broker-main"] == 3
    patches = [r for r in k8s.requests if r.method == "PATCH"]
    assert [(r.content_type, r.body) for r in patches] == [
        ("application/merge-patch+json", {"spec": {"replicas": 3}})
    ]
    rows = [(b.broker_id, b.host, b.port, b.kafka_port, b.phase) for b in brokers(cluster)]
    assert rows == [
        (n, f"broker-main-{n - 1}.broker-main.{NAMESPACE}.svc", 9092, 9093, BrokerPhase.STARTING)
        for n in (1, 2, 3)
    ]
    assert all(provisioner.is_running(b) for b in brokers(cluster))
    # Again: nothing to scale; and a rotated token is read anew for each call.
    k8s.token = "token-2"
    token_file.write_text("token-2\n")
    before = len(k8s.requests)
    provisioner.ensure_brokers(brokers(cluster))
    assert [r.method for r in k8s.requests[before:]] == ["GET", "GET", "GET", "GET"]
    assert {r.authorization for r in k8s.requests[before:]} == {"Bearer token-2"}


def test_a_pod_that_cannot_run_is_a_provisioning_error_naming_why(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    k8s.pod_status[1] = waiting("ImagePullBackOff", 'Back-off pulling image "meridian:nope"')
    k8s.pod_status[2] = waiting("ContainerCreating")  # starting: not an error
    provisioner = provisioner_for(k8s, token_file)
    with pytest.raises(ProvisioningError) as raised:
        provisioner.ensure_brokers(brokers(cluster))
    assert raised.value.broker.broker_id == 2
    assert "broker-main-1" in raised.value.message
    assert "ImagePullBackOff" in raised.value.message
    assert "meridian:nope" in raised.value.message
    assert not provisioner.is_running(brokers(cluster)[2])  # still creating


def test_stop_broker_scales_down_from_the_top_only_and_does_not_wait(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    k8s.graceful = True  # a pod scaled away terminates until the test says it is gone
    provisioner = provisioner_for(k8s, token_file)
    provisioner.ensure_brokers(brokers(cluster))
    first, second, third = brokers(cluster)

    with pytest.raises(ProvisioningError, match="highest ordinals first"):
        provisioner.stop_broker(second)
    assert k8s.statefulsets["broker-main"] == 3
    assert provisioner.is_running(second)

    # Scaled down at once; stopping while its pod terminates, stopped once it is gone.
    provisioner.stop_broker(third)
    assert k8s.statefulsets["broker-main"] == 2
    third.refresh_from_db()
    assert (third.phase, third.phase_reason) == (
        BrokerPhase.STOPPING, "waiting for its pod broker-main-2 to terminate",
    )  # fmt: skip
    assert not provisioner.is_running(third)  # terminating
    provisioner.stop_broker(third)
    assert Broker.objects.get(pk=third.pk).phase == BrokerPhase.STOPPING
    k8s.finish_terminating()
    provisioner.stop_broker(third)
    third.refresh_from_db()
    assert third.phase == BrokerPhase.STOPPED
    assert "broker-main-2" not in k8s.pods
    patches = [r.body for r in k8s.requests if r.method == "PATCH"]
    assert patches[-1] == {"spec": {"replicas": 2}}
    assert len(patches) == 2  # asked again: no second scale-down

    # A cluster being deleted goes to zero whatever the order.
    Cluster.objects.filter(pk=cluster.pk).update(status=ProvisioningStatus.DELETING)
    provisioner.stop_broker(first)
    assert k8s.statefulsets["broker-main"] == 0
    k8s.finish_terminating()
    assert k8s.pods == {}


def test_brokers_being_stopped_and_clusters_being_deleted_are_not_scaled_back_up(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    """A caller (the controller's tick) holding rows read before a deletion began."""
    provisioner = provisioner_for(k8s, token_file)
    stale = brokers(cluster)
    Broker.objects.filter(cluster=cluster, broker_id=3).update(phase=BrokerPhase.STOPPING)
    provisioner.ensure_brokers(stale)
    assert k8s.statefulsets["broker-main"] == 2
    assert not Broker.objects.get(cluster=cluster, broker_id=3).host.startswith("broker-main-2")

    k8s._reconcile("broker-main", 0)  # the deletion scaled it to zero meanwhile
    Cluster.objects.filter(pk=cluster.pk).update(status=ProvisioningStatus.DELETING)
    before = len(k8s.requests)
    provisioner.ensure_brokers(brokers(cluster)[:2])
    assert k8s.requests[before:] == []
    assert k8s.statefulsets["broker-main"] == 0


def _scale_spec(value: Any) -> Callable[[Request, Any], Any]:
    def rewrite(request: Request, body: Any) -> Any:
        return {**body, "spec": value} if "/scale" in request.path else body

    return rewrite


def _pod_status(value: Any) -> Callable[[Request, Any], Any]:
    def rewrite(request: Request, body: Any) -> Any:
        return {**body, "status": value} if "/pods/" in request.path else body

    return rewrite


@pytest.mark.parametrize(
    ("fault", "rewrite", "expected", "answer"),
    [
        ("stall", None, "ReadTimeoutError", "any"),  # headers, then silence
        ("truncate", None, "ProtocolError", "any"),  # half the body, the connection closed
        (None, _scale_spec(None), "not a Scale", "scale"),
        (None, _scale_spec({"replicas": "three"}), "replicas is not a int", "scale"),
        (None, _scale_spec({"replicas": -1}), "replicas is -1", "scale"),
        (None, _scale_spec("3"), "spec is not a dict", "scale"),
        (None, _pod_status("Running"), "status is not a dict", "pod"),
        (None, _pod_status({"containerStatuses": {"b": {}}}), "containerStatuses is not", "pod"),
        (None, _pod_status({"containerStatuses": ["broker"]}), "not an object", "pod"),
        (None, _pod_status({"containerStatuses": [{"state": {"waiting": 7}}]}), "waiting", ""),
    ],
)
def test_a_failing_or_misbehaving_api_is_the_clusters_problem_not_a_brokers(
    cluster: Cluster,
    k8s: FakeKubernetes,
    token_file: Path,
    fault: str | None,
    rewrite: Callable[[Request, Any], Any] | None,
    expected: str,
    answer: str,
) -> None:
    """Every call fails with the cluster's error: the call that reads the broken answer
    (``answer``: a scale's, a pod's, or any) and ``ensure_brokers``, which reads both."""
    provisioner_for(k8s, token_file).ensure_brokers(brokers(cluster))  # pods running
    provisioner = provisioner_for(k8s, token_file, timeout_s=0.3 if fault == "stall" else 5.0)
    k8s.fault, k8s.rewrite = fault, rewrite
    with pytest.raises(ClusterProvisioningError, match=expected) as raised:
        provisioner.ensure_brokers(brokers(cluster))
    assert raised.value.cluster == cluster
    if answer in ("pod", "any"):
        with pytest.raises(ClusterProvisioningError, match=expected):
            provisioner.is_running(brokers(cluster)[0])
    if answer in ("scale", "any"):
        with pytest.raises(ClusterProvisioningError, match=expected):
            provisioner.stop_broker(brokers(cluster)[2])
    assert {b.phase for b in brokers(cluster)} == {BrokerPhase.STARTING}


def test_a_missing_statefulset_or_a_refused_token_is_an_error(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    del k8s.statefulsets["broker-main"]
    with pytest.raises(
        ClusterProvisioningError, match=f"no StatefulSet broker-main in namespace {NAMESPACE}"
    ):
        provisioner_for(k8s, token_file).ensure_brokers(brokers(cluster))
    k8s.statefulsets["broker-main"] = 0
    token_file.write_text("stolen\n")
    with pytest.raises(ClusterProvisioningError, match="401"):
        provisioner_for(k8s, token_file).ensure_brokers(brokers(cluster))


def test_the_api_is_called_over_tls_with_the_clusters_ca(
    cluster: Cluster, token_file: Path, tmp_path: Path
) -> None:
    tls = make_tls_files(tmp_path / "tls")
    fake = FakeKubernetes(namespace=NAMESPACE, token="token-1", statefulsets={"broker-main": 0},
                          tls=tls)  # fmt: skip
    with fake.serving():
        assert fake.url.startswith("https://")
        provisioner_for(fake, token_file, ca_file=tls.ca_file).ensure_brokers(brokers(cluster))
        assert fake.statefulsets["broker-main"] == 3
        other_ca = make_tls_files(tmp_path / "other")
        with pytest.raises(ClusterProvisioningError, match=r"(?i)certificate"):
            provisioner_for(fake, token_file, ca_file=other_ca.ca_file).ensure_brokers(
                brokers(cluster)
            )


def test_mirror_workers_are_refused(k8s: FakeKubernetes, token_file: Path) -> None:
    provisioner = provisioner_for(k8s, token_file)
    spec = MirrorWorkerSpec(region="eu-west", name="link-1-east-eu-west", generation=1)
    with pytest.raises(MirrorWorkerError, match="Kubernetes") as raised:
        provisioner.ensure_mirror_worker(spec, {}, None)
    assert raised.value.message == NO_MIRROR_WORKERS


def _controller(provisioner: KubernetesProvisioner, tmp_path: Path) -> Controller:
    return Controller(
        "eu-west", "c1", FileLease(tmp_path / "eu-west.lock"),
        provisioner_for=lambda cluster: provisioner, pusher=MetadataPusher(timeout_s=1.0),
    )  # fmt: skip


def test_the_regions_controller_deletes_a_kubernetes_cluster(
    cluster: Cluster,
    k8s: FakeKubernetes,
    token_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    django_capture_on_commit_callbacks: Any,
) -> None:
    """The deletion job runs in a Celery worker, which cannot reach the region's
    Kubernetes API: it leaves the cluster to the region's controller, which scales the
    StatefulSet to zero and removes the cluster once every pod is gone, over its ticks
    (none of which waits for a pod)."""
    provisioner = provisioner_for(k8s, token_file)
    provisioner.ensure_brokers(brokers(cluster))
    k8s.graceful = True
    monkeypatch.setattr("controlplane.regions.teardown.get_provisioner", lambda c: provisioner)
    monkeypatch.setattr(tasks.delete_cluster, "delay", tasks.delete_cluster.run)
    with django_capture_on_commit_callbacks(execute=True):
        services.delete_cluster(cluster, actor=ACTOR)  # the job ran: nothing done
    assert Cluster.objects.get(pk=cluster.pk).status == ProvisioningStatus.DELETING
    assert not [r for r in k8s.requests if r.method == "PATCH" and r.body["spec"]["replicas"] < 3]
    Cluster.objects.filter(pk=cluster.pk).update(updated_at=cluster.created_at)
    assert teardown.stale_deleting_clusters() == []  # not the reconcile job's either

    controller = _controller(provisioner, tmp_path)
    try:
        controller.tick()
        assert k8s.statefulsets["broker-main"] == 0
        assert {b.phase for b in brokers(cluster)} == {BrokerPhase.STOPPING}
        controller.tick()  # the pods still terminate
        assert Cluster.objects.filter(pk=cluster.pk).exists()
        k8s.finish_terminating()
        controller.tick()
        assert not Cluster.objects.filter(pk=cluster.pk).exists()
        assert not Broker.objects.filter(cluster_id=cluster.pk).exists()
    finally:
        controller.close()


def test_a_cluster_the_api_cannot_size_says_why_and_no_broker_is_blamed(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path, tmp_path: Path
) -> None:
    del k8s.statefulsets["broker-main"]
    controller = _controller(provisioner_for(k8s, token_file), tmp_path)
    try:
        controller.tick()
    finally:
        controller.close()
    shown = Cluster.objects.get(pk=cluster.pk)
    assert shown.status == ProvisioningStatus.PROVISIONING
    assert shown.status_reason.startswith("waiting for broker 1, 2, 3; provisioner: ")
    assert "no StatefulSet broker-main" in shown.status_reason
    assert {(b.phase, b.phase_reason) for b in brokers(cluster)} == {(BrokerPhase.PENDING, "")}
