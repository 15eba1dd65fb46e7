from django.urls import include, path
from drf_spectacular.views import SpectacularJSONAPIView

from controlplane.accounts.local_oidc_views import discovery

urlpatterns = [
    path("api/v1/openapi.json", SpectacularJSONAPIView.as_view(), name="openapi"),
    path("api/v1/", include("controlplane.core.api.urls")),
    path("api/v1/", include("controlplane.tenants.api.urls")),
    path("api/v1/", include("controlplane.regions.api.urls")),
    path("api/v1/", include("controlplane.topics.api.urls")),
    path("api/v1/", include("controlplane.lanes.api.urls")),
    path("api/v1/", include("controlplane.databus.api.urls")),
    path("api/v1/", include("controlplane.exports.api.urls")),
    path("api/v1/", include("controlplane.indexes.api.urls")),
    path("api/v1/", include("controlplane.mirrors.api.urls")),
    path("api/v1/", include("controlplane.delays.api.urls")),
    path("api/v1/", include("controlplane.retries.api.urls")),
    # Before groups: a group id may hold '/', so the groups' detail route would take
    # ".../metrics" for an id.
    path("api/v1/", include("controlplane.metrics.api.urls")),
    path("api/v1/", include("controlplane.groups.api.urls")),
    path("api/v1/", include("controlplane.transactions.api.urls")),
    path("api/v1/", include("controlplane.quotas.api.urls")),
    path("api/v1/", include("controlplane.accounts.api.urls")),
    path(".well-known/openid-configuration", discovery, name="openid-configuration"),
    path("console/auth/", include("web.auth.urls")),
    path("console/", include("web.urls")),
]

# What Django answers outside any view, in the API's error shape.
handler400 = "controlplane.core.api.errors.bad_request_view"
handler403 = "controlplane.core.api.errors.permission_denied_view"
handler404 = "controlplane.core.api.errors.not_found_view"
handler500 = "controlplane.core.api.errors.server_error_view"
