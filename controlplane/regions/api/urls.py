from rest_framework.routers import SimpleRouter

from controlplane.regions.api.views import BrokerViewSet, ClusterViewSet, RegionViewSet

router = SimpleRouter(trailing_slash=False)
router.register("regions", RegionViewSet, basename="region")
router.register("clusters", ClusterViewSet, basename="cluster")
router.register("brokers", BrokerViewSet, basename="broker")

urlpatterns = router.urls
