from django.apps import AppConfig


class LanesConfig(AppConfig):
    name = "controlplane.lanes"
    label = "lanes"

    def ready(self) -> None:
        # Lanes consume the ``max_lanes`` quota; the quotas app, below this one, counts
        # them through the meter registered here.
        from controlplane.lanes.usage import LaneUsage
        from controlplane.quotas.usage import register_meter

        register_meter(self.label, LaneUsage())
