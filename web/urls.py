"""``/console/``: the tenant's pages live under ``t/<tenant>/``."""

from django.urls import path

from web.views import dashboard, home, messages, topics

app_name = "web"

TOPIC = "t/<slug:tenant>/topics/<str:topic>/"

urlpatterns = [
    path("", home.index, name="index"),
    path("t/<slug:tenant>/", dashboard.dashboard, name="dashboard"),
    path("t/<slug:tenant>/topics/", topics.topic_list, name="topic-list"),
    path("t/<slug:tenant>/topics/new/", topics.topic_create, name="topic-create"),
    path(TOPIC, topics.topic_detail, name="topic-detail"),
    path(TOPIC + "config/", topics.topic_config, name="topic-config"),
    path(TOPIC + "partitions/", topics.topic_partitions, name="topic-partitions"),
    path(TOPIC + "delete/", topics.topic_delete, name="topic-delete"),
    path(TOPIC + "messages/", messages.topic_messages, name="topic-messages"),
]
