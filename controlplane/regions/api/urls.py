from rest_framework.routers import SimpleRouter

from controlplane.regions.api.views import ClusterViewSet, RegionViewSet

# ``brokers`` is routed by the topics app (``topics.api.views.BrokerViewSet``): its
# decommissioning moves replicas.
router = SimpleRouter(trailing_slash=False)
router.register("regions", RegionViewSet, basename="region")
router.register("clusters", ClusterViewSet, basename="cluster")

urlpatterns = router.urls
