from rest_framework.routers import SimpleRouter

from controlplane.delays.api.views import DelayedRecordViewSet

router = SimpleRouter(trailing_slash=False)
router.register("delayed-records", DelayedRecordViewSet, basename="delayed-record")

urlpatterns = router.urls
