from rest_framework.routers import SimpleRouter

from controlplane.tenants.api.views import TenantViewSet

router = SimpleRouter(trailing_slash=False)
router.register("tenants", TenantViewSet, basename="tenant")

urlpatterns = router.urls
