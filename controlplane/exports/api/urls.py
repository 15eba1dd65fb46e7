from rest_framework.routers import SimpleRouter

from controlplane.exports.api.views import ExportViewSet

router = SimpleRouter(trailing_slash=False)
router.register("exports", ExportViewSet, basename="export")

urlpatterns = router.urls
