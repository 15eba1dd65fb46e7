from rest_framework.routers import SimpleRouter

from controlplane.topics.api.views import (
    BrokerViewSet,
    DriftFindingViewSet,
    TopicAclViewSet,
    TopicViewSet,
)

router = SimpleRouter(trailing_slash=False)
router.register("topics", TopicViewSet, basename="topic")
router.register("topic-acls", TopicAclViewSet, basename="topic-acl")
router.register("drift-findings", DriftFindingViewSet, basename="drift-finding")
router.register("brokers", BrokerViewSet, basename="broker")

urlpatterns = router.urls
