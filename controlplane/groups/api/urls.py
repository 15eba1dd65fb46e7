from rest_framework.routers import SimpleRouter

from controlplane.groups.api.views import GroupViewSet

router = SimpleRouter(trailing_slash=False)
router.register("groups", GroupViewSet, basename="group")

urlpatterns = router.urls
