"""Meridian's Python SDK: ``Producer``, ``Consumer`` and ``Admin``.

Every failure is a ``MeridianError`` with a typed ``code`` and ``retriable``.
"""

from dataplane.client.admin import Admin
from dataplane.client.consumer import Consumer
from dataplane.client.errors import BufferFull, BufferFullError, ConfigError
from dataplane.client.future import DeliveryFuture, DeliveryFutures
from dataplane.client.producer import Producer, ProducerRecord
from dataplane.client.types import (
    ORIGIN_OFFSET,
    ORIGIN_REGION,
    ConsumerGroupMetadata,
    ConsumerRecord,
    CopiedBatch,
    PolledBatch,
    Provenance,
    RecordMetadata,
    TopicPartition,
)
from dataplane.errors import ErrorCode, MeridianError

__all__ = [
    "ORIGIN_OFFSET",
    "ORIGIN_REGION",
    "Admin",
    "BufferFull",
    "BufferFullError",
    "ConfigError",
    "Consumer",
    "ConsumerGroupMetadata",
    "ConsumerRecord",
    "CopiedBatch",
    "DeliveryFuture",
    "DeliveryFutures",
    "ErrorCode",
    "MeridianError",
    "PolledBatch",
    "Producer",
    "ProducerRecord",
    "Provenance",
    "RecordMetadata",
    "TopicPartition",
]
