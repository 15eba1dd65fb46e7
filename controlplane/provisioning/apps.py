from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    name = "controlplane.provisioning"
    label = "provisioning"

    def ready(self) -> None:
        # Imported here, not at module level: the implementations import models, which
        # exist only once the app registry is ready.
        from controlplane.provisioning.kubernetes import KubernetesProvisioner
        from controlplane.provisioning.local import LocalProvisioner
        from controlplane.provisioning.static import StaticProvisioner
        from controlplane.regions.choices import ProvisionerKind
        from controlplane.regions.provisioners import register_provisioner

        register_provisioner(ProvisionerKind.LOCAL, LocalProvisioner)
        register_provisioner(ProvisionerKind.STATIC, StaticProvisioner)
        register_provisioner(ProvisionerKind.KUBERNETES, KubernetesProvisioner)
