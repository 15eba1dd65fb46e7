from django.urls import path
from rest_framework.routers import SimpleRouter

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
    *router.urls,
]
