"""The regions app chooses a cluster's provisioner among those the provisioning app
registers when Django starts; a kind nobody registered is a typed error."""

from __future__ import annotations

import pytest

from controlplane.provisioning.kubernetes import KubernetesProvisioner
from controlplane.provisioning.local import LocalProvisioner
from controlplane.provisioning.static import StaticProvisioner
from controlplane.regions.models import Cluster
from controlplane.regions.provisioners import UnknownProvisionerError, get_provisioner


def test_the_provisioning_app_registers_its_provisioners() -> None:
    assert isinstance(get_provisioner(Cluster(provisioner="local")), LocalProvisioner)
    assert isinstance(get_provisioner(Cluster(provisioner="static")), StaticProvisioner)
    assert isinstance(get_provisioner(Cluster(provisioner="kubernetes")), KubernetesProvisioner)


def test_one_provisioner_per_kind_and_process() -> None:
    assert get_provisioner(Cluster(provisioner="local")) is get_provisioner(
        Cluster(provisioner="local")
    )


def test_an_unregistered_kind_is_refused() -> None:
    with pytest.raises(UnknownProvisionerError) as refused:
        get_provisioner(Cluster(provisioner="nomad"))
    assert refused.value.kind == "nomad"
