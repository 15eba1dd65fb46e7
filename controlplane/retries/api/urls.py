from rest_framework.routers import SimpleRouter

from controlplane.retries.api.views import RetryPolicyViewSet

router = SimpleRouter(trailing_slash=False)
router.register("retry-policies", RetryPolicyViewSet, basename="retry-policy")

urlpatterns = router.urls
