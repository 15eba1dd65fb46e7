from django.apps import AppConfig


class IndexesConfig(AppConfig):
    name = "controlplane.indexes"
    label = "indexes"

    def ready(self) -> None:
        # Indexes consume the ``max_indexes`` quota; the quotas app, below this one,
        # counts them through the meter registered here.
        from controlplane.indexes.usage import IndexUsage
        from controlplane.quotas.usage import register_meter

        register_meter(self.label, IndexUsage())
