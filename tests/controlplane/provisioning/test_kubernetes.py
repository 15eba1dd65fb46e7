"""The Kubernetes provisioner against a stand-in for the Kubernetes API server
(``tests.support.kubernetes_api``, over a real socket; Kubernetes cannot run here): it
sizes the cluster's StatefulSet, records each broker's stable DNS name, reports a pod
that cannot run, scales down only from the top, authenticates with the rotating token
and the cluster's CA, and runs no mirror workers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.core.actors import Actor
from controlplane.core.choices import ProvisioningStatus
from controlplane.provisioning.kubernetes import (
    NO_MIRROR_WORKERS,
    KubernetesConfig,
    KubernetesProvisioner,
)
from controlplane.regions import services
from controlplane.regions.choices import BrokerPhase, ProvisionerKind
from controlplane.regions.models import Broker, Cluster
from controlplane.regions.provisioners import (
    MirrorWorkerError,
    MirrorWorkerSpec,
    ProvisioningError,
    get_provisioner,
)
from tests.support.kubernetes_api import FakeKubernetes, waiting
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
    fake: FakeKubernetes, token_file: Path, ca_file: Path | None = None
) -> KubernetesProvisioner:
    config = KubernetesConfig(
        api_url=fake.url, token_file=token_file, ca_file=ca_file, namespace=NAMESPACE,
        broker_port=9092, kafka_port=9093, timeout_s=5.0,
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


def test_stop_broker_scales_down_from_the_top_only(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    provisioner = provisioner_for(k8s, token_file)
    provisioner.ensure_brokers(brokers(cluster))
    first, second, third = brokers(cluster)

    with pytest.raises(ProvisioningError, match="highest ordinals first"):
        provisioner.stop_broker(second)
    assert k8s.statefulsets["broker-main"] == 3
    assert provisioner.is_running(second)

    provisioner.stop_broker(third)
    assert k8s.statefulsets["broker-main"] == 2
    assert "broker-main-2" not in k8s.pods
    third.refresh_from_db()
    assert third.phase == BrokerPhase.STOPPED
    assert not provisioner.is_running(third)

    # A cluster being deleted goes to zero whatever the order.
    Cluster.objects.filter(pk=cluster.pk).update(status=ProvisioningStatus.DELETING)
    first.refresh_from_db()
    provisioner.stop_broker(first)
    assert k8s.statefulsets["broker-main"] == 0
    assert k8s.pods == {}


def test_a_missing_statefulset_or_a_refused_token_is_an_error(
    cluster: Cluster, k8s: FakeKubernetes, token_file: Path
) -> None:
    del k8s.statefulsets["broker-main"]
    with pytest.raises(
        ProvisioningError, match=f"no StatefulSet broker-main in namespace {NAMESPACE}"
    ):
        provisioner_for(k8s, token_file).ensure_brokers(brokers(cluster))
    k8s.statefulsets["broker-main"] = 0
    token_file.write_text("stolen\n")
    with pytest.raises(ProvisioningError, match="401"):
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
        with pytest.raises(ProvisioningError, match=r"(?i)certificate"):
            provisioner_for(fake, token_file, ca_file=other_ca.ca_file).ensure_brokers(
                brokers(cluster)
            )


def test_mirror_workers_are_refused(k8s: FakeKubernetes, token_file: Path) -> None:
    provisioner = provisioner_for(k8s, token_file)
    spec = MirrorWorkerSpec(region="eu-west", name="link-1-east-eu-west", generation=1)
    with pytest.raises(MirrorWorkerError, match="Kubernetes") as raised:
        provisioner.ensure_mirror_worker(spec, {}, None)
    assert raised.value.message == NO_MIRROR_WORKERS
