from rest_framework.routers import SimpleRouter

from controlplane.quotas.api.views import QuotaViewSet

router = SimpleRouter(trailing_slash=False)
router.register("quotas", QuotaViewSet, basename="quota")

urlpatterns = router.urls
