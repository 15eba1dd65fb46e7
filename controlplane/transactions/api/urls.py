from django.urls import path
from rest_framework.routers import SimpleRouter

from controlplane.transactions.api.views import (
    HalfMessageViewSet,
    PartitionProducerViewSet,
    TransactionViewSet,
)

router = SimpleRouter(trailing_slash=False)
router.register("transactions", TransactionViewSet, basename="transaction")
router.register("half-messages", HalfMessageViewSet, basename="half-message")

urlpatterns = [
    *router.urls,
    path(
        "half-messages/<str:group>/<str:half_id>/resolve",
        HalfMessageViewSet.as_view({"post": "resolve"}),
        name="half-message-resolve",
    ),
    path(
        "partition-producers/<str:topic>/<int:partition>",
        PartitionProducerViewSet.as_view({"get": "list"}),
        name="partition-producers",
    ),
    path(
        "partition-producers/<str:topic>/<int:partition>/<int:producer_id>/abort",
        PartitionProducerViewSet.as_view({"post": "abort"}),
        name="partition-producer-abort",
    ),
]
