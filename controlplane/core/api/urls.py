from rest_framework.routers import SimpleRouter

from controlplane.core.api.audit import AuditEventViewSet

router = SimpleRouter(trailing_slash=False)
router.register("audit-events", AuditEventViewSet, basename="audit-event")

urlpatterns = router.urls
