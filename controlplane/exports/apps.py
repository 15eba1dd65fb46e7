from django.apps import AppConfig


class ExportsConfig(AppConfig):
    name = "controlplane.exports"
    label = "exports"

    def ready(self) -> None:
        # Exports consume the ``max_exports`` quota; the quotas app, below this one,
        # counts them through the meter registered here.
        from controlplane.exports.usage import ExportUsage
        from controlplane.quotas.usage import register_meter

        register_meter(self.label, ExportUsage())
