from rest_framework.routers import SimpleRouter

from controlplane.indexes.api.views import IndexViewSet

router = SimpleRouter(trailing_slash=False)
router.register("indexes", IndexViewSet, basename="index")

urlpatterns = router.urls
