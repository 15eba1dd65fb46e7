from rest_framework.routers import SimpleRouter

from controlplane.databus.api.views import DatabusAgentViewSet, DatabusConfigViewSet

router = SimpleRouter(trailing_slash=False)
router.register("databus-configs", DatabusConfigViewSet, basename="databus-config")
router.register("databus-agents", DatabusAgentViewSet, basename="databus-agent")

urlpatterns = router.urls
