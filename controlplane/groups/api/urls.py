from rest_framework.routers import SimpleRouter

from controlplane.groups.api.views import GroupViewSet

router = SimpleRouter(trailing_slash=False)
router.register("groups", GroupViewSet, basename="group")

# A group id may hold '/': the action's route (".../reset-offsets") must be tried before
# the detail route, whose lookup would swallow it.
urlpatterns = sorted(router.urls, key=lambda url: "reset-offsets" not in str(url.pattern))
