from django.urls import re_path

from controlplane.metrics.api.views import GroupMetricsView, TopicMetricsView

urlpatterns = [
    re_path(r"^topics/(?P<name>[^/]+)/metrics$", TopicMetricsView.as_view(), name="topic-metrics"),
    re_path(r"^groups/(?P<group>.+)/metrics$", GroupMetricsView.as_view(), name="group-metrics"),
]
