from rest_framework.routers import SimpleRouter

from controlplane.mirrors.api.views import MirrorLinkViewSet

router = SimpleRouter(trailing_slash=False)
router.register("mirrors", MirrorLinkViewSet, basename="mirror")

urlpatterns = router.urls
