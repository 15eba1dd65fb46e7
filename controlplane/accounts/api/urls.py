from django.urls import path
from rest_framework.routers import SimpleRouter

from controlplane.accounts import local_oidc_views
from controlplane.accounts.api.views import (
    JwksView,
    MemberViewSet,
    ServiceAccountViewSet,
    TokenView,
    WhoAmIView,
)

router = SimpleRouter(trailing_slash=False)
router.register("members", MemberViewSet, basename="member")
router.register("service-accounts", ServiceAccountViewSet, basename="service-account")

urlpatterns = [
    path("auth/token", TokenView.as_view(), name="auth-token"),
    path("auth/jwks.json", JwksView.as_view(), name="auth-jwks"),
    path("auth/whoami", WhoAmIView.as_view(), name="auth-whoami"),
    path("auth/authorize", local_oidc_views.authorize, name="auth-authorize"),
    path("auth/userinfo", local_oidc_views.userinfo, name="auth-userinfo"),
    path("auth/logout", local_oidc_views.end_session, name="auth-logout"),
    *router.urls,
]
