from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "controlplane.accounts"
    label = "accounts"

    def ready(self) -> None:
        # Tenants, below this app, reach the identity provider through the protocol they
        # own; this app installs the configured provider there. Imported here: the
        # providers import models, which exist once the registry is ready.
        from controlplane.accounts.identity import get_identity
        from controlplane.tenants.identity import use_identity

        use_identity(get_identity)
