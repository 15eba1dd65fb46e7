from django.apps import AppConfig


class MirrorsConfig(AppConfig):
    name = "controlplane.mirrors"
    label = "mirrors"

    def ready(self) -> None:
        # Mirror links consume the ``max_mirrors`` quota; the quotas app, below this one,
        # counts them through the meter registered here.
        from controlplane.mirrors.usage import MirrorUsage
        from controlplane.quotas.usage import register_meter

        register_meter(self.label, MirrorUsage())
