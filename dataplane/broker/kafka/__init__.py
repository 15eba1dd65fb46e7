"""Kafka's wire protocol on a Meridian broker: existing Kafka clients and tools.

``KafkaListener`` (``listener``) serves a second port beside gRPC (``--kafka-listen``):
the same partitions, groups, quotas, ACLs and tenant isolation through the broker's own
servicers (``calls``: no second storage path, no second coordinator). ``wire`` frames and
the APIs and versions served (Kafka's message schemas through kafka-python's
``kafka.protocol``); ``data`` and ``groups`` translate each API; ``sasl`` is OAUTHBEARER
and PLAIN; ``codes`` is the one table from Meridian's error codes to Kafka's. The guide is
docs/kafka.md.
"""

from dataplane.broker.kafka.listener import KafkaListener

__all__ = ["KafkaListener"]
