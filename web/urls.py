"""``/console/``: the tenant's pages live under ``t/<tenant>/``."""

from django.urls import path

from web.views import (
    acls,
    audit,
    charts,
    dashboard,
    databus,
    delays,
    exports,
    groups,
    home,
    indexes,
    lanes,
    members,
    messages,
    mirrors,
    platform,
    service_accounts,
    topics,
    transactions,
)

app_name = "web"

TOPIC = "t/<slug:tenant>/topics/<str:topic>/"
ACCOUNTS = "t/<slug:tenant>/service-accounts/"
ACCOUNT = ACCOUNTS + "<str:account>/"
LANES = "t/<slug:tenant>/lanes/"
LANE = LANES + "<str:lane>/"
DATABUS = "t/<slug:tenant>/databus/"
DATABUS_CONFIG = DATABUS + "<str:config>/"
EXPORTS = "t/<slug:tenant>/exports/"
EXPORT = EXPORTS + "<str:export>/"
INDEXES = "t/<slug:tenant>/indexes/"
INDEX = INDEXES + "<str:index>/"
MIRRORS = "t/<slug:tenant>/mirrors/"
MIRROR = MIRRORS + "<str:mirror>/"
RETRIES = "t/<slug:tenant>/retries/"
RETRY = RETRIES + "<str:group>/"

urlpatterns = [
    path("", home.index, name="index"),
    # The platform administrator's pages: a 404 for everyone else.
    path("platform/", platform.overview, name="platform-overview"),
    path(
        "platform/brokers/<int:broker>/decommission/",
        platform.broker_decommission,
        name="platform-broker-decommission",
    ),
    path("platform/tenants/", platform.tenant_list, name="platform-tenant-list"),
    path("platform/tenants/new/", platform.tenant_create, name="platform-tenant-create"),
    path("platform/tenants/<str:tenant>/", platform.tenant_detail, name="platform-tenant-detail"),
    path("t/<slug:tenant>/", dashboard.dashboard, name="dashboard"),
    path("t/<slug:tenant>/metrics.json", charts.dashboard_metrics, name="dashboard-metrics"),
    path("t/<slug:tenant>/topics/", topics.topic_list, name="topic-list"),
    path("t/<slug:tenant>/topics/new/", topics.topic_create, name="topic-create"),
    path(TOPIC, topics.topic_detail, name="topic-detail"),
    path(TOPIC + "metrics.json", charts.topic_metrics, name="topic-metrics"),
    path(TOPIC + "config/", topics.topic_config, name="topic-config"),
    path(TOPIC + "partitions/", topics.topic_partitions, name="topic-partitions"),
    path(TOPIC + "delete/", topics.topic_delete, name="topic-delete"),
    path(TOPIC + "messages/", messages.topic_messages, name="topic-messages"),
    path(ACCOUNTS, service_accounts.account_list, name="service-account-list"),
    path(ACCOUNT, service_accounts.account_detail, name="service-account-detail"),
    path(ACCOUNT + "role/", service_accounts.account_role, name="service-account-role"),
    path(ACCOUNT + "rotate/", service_accounts.account_rotate, name="service-account-rotate"),
    path(ACCOUNT + "delete/", service_accounts.account_delete, name="service-account-delete"),
    path("t/<slug:tenant>/delayed/", delays.delayed_list, name="delayed-list"),
    path("t/<slug:tenant>/delayed/cancel/", delays.delayed_cancel, name="delayed-cancel"),
    path(RETRIES, delays.retry_list, name="retry-list"),
    path(RETRY, delays.retry_detail, name="retry-detail"),
    path(RETRY + "replay/", delays.retry_replay, name="retry-replay"),
    path(RETRY + "delete/", delays.retry_delete, name="retry-delete"),
    path(
        RETRY + "dead-letters/<int:partition>/<int:offset>/",
        delays.dead_letter_detail,
        name="dead-letter-detail",
    ),
    path(LANES, lanes.lane_list, name="lane-list"),
    path(LANE, lanes.lane_detail, name="lane-detail"),
    path(LANE + "edit/", lanes.lane_edit, name="lane-edit"),
    path(LANE + "delete/", lanes.lane_delete, name="lane-delete"),
    path(DATABUS, databus.config_list, name="databus-list"),
    path(DATABUS_CONFIG, databus.config_detail, name="databus-detail"),
    path(DATABUS_CONFIG + "edit/", databus.config_edit, name="databus-edit"),
    path(DATABUS_CONFIG + "delete/", databus.config_delete, name="databus-delete"),
    path(EXPORTS, exports.export_list, name="export-list"),
    path(EXPORT, exports.export_detail, name="export-detail"),
    path(EXPORT + "run/", exports.export_run, name="export-run"),
    path(EXPORT + "delete/", exports.export_delete, name="export-delete"),
    path(INDEXES, indexes.index_list, name="index-list"),
    path(INDEX, indexes.index_detail, name="index-detail"),
    path(INDEX + "build/", indexes.index_build, name="index-build"),
    path(INDEX + "delete/", indexes.index_delete, name="index-delete"),
    path(MIRRORS, mirrors.mirror_list, name="mirror-list"),
    path(MIRROR, mirrors.mirror_detail, name="mirror-detail"),
    path(MIRROR + "metrics.json", mirrors.mirror_metrics, name="mirror-metrics"),
    path(MIRROR + "pause/", mirrors.mirror_pause, name="mirror-pause"),
    path(MIRROR + "resume/", mirrors.mirror_resume, name="mirror-resume"),
    path(MIRROR + "delete/", mirrors.mirror_delete, name="mirror-delete"),
    path("t/<slug:tenant>/acls/", acls.acl_list, name="acl-list"),
    path("t/<slug:tenant>/acls/grant/", acls.acl_grant, name="acl-grant"),
    path("t/<slug:tenant>/acls/<int:acl>/operations/", acls.acl_operations, name="acl-operations"),
    path("t/<slug:tenant>/acls/<int:acl>/revoke/", acls.acl_revoke, name="acl-revoke"),
    path("t/<slug:tenant>/members/", members.member_list, name="member-list"),
    path("t/<slug:tenant>/members/invite/", members.member_invite, name="member-invite"),
    path("t/<slug:tenant>/members/<int:member>/role/", members.member_role, name="member-role"),
    path(
        "t/<slug:tenant>/members/<int:member>/remove/", members.member_remove, name="member-remove"
    ),
    path("t/<slug:tenant>/groups/", groups.group_list, name="group-list"),
    # No trailing slash: unlike any group page's URL, so no group id is ambiguous.
    path(
        "t/<slug:tenant>/groups/<path:group>/metrics.json",
        charts.group_metrics,
        name="group-metrics",
    ),
    # A group id may hold any character, "/" too: GET shows the group, POST resets it.
    path("t/<slug:tenant>/groups/<path:group>/", groups.group_page, name="group-detail"),
    path("t/<slug:tenant>/transactions/", transactions.transaction_list, name="transaction-list"),
    path("t/<slug:tenant>/audit/", audit.audit_list, name="audit-list"),
]
