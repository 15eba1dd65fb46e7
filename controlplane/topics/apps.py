from django.apps import AppConfig


class TopicsConfig(AppConfig):
    name = "controlplane.topics"
    label = "topics"

    def ready(self) -> None:
        # Topics consume quota; the quotas app, below this one, counts them through the
        # meter registered here. Imported here: models exist once the registry is ready.
        from controlplane.quotas.usage import register_meter
        from controlplane.topics.usage import TopicUsage

        register_meter(self.label, TopicUsage())
