from rest_framework.routers import SimpleRouter

from controlplane.lanes.api.views import LaneViewSet

router = SimpleRouter(trailing_slash=False)
router.register("lanes", LaneViewSet, basename="lane")

urlpatterns = router.urls
