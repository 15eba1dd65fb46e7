"""``/console/``: the tenant's pages live under ``t/<tenant>/``."""

from django.urls import path

from web.views import audit, dashboard, groups, home, topics

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
    path("t/<slug:tenant>/groups/", groups.group_list, name="group-list"),
    # A group id may hold any character, "/" too: GET shows the group, POST resets it.
    path("t/<slug:tenant>/groups/<path:group>/", groups.group_page, name="group-detail"),
    path("t/<slug:tenant>/audit/", audit.audit_list, name="audit-list"),
]
