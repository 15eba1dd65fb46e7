from __future__ import annotations

from typing import Any

from rest_framework import serializers


class TxnPartitionSerializer(serializers.Serializer[Any]):
    topic = serializers.CharField()
    partition = serializers.IntegerField()


class TransactionSerializer(serializers.Serializer[Any]):
    transactional_id = serializers.CharField()
    tenant = serializers.CharField()
    state = serializers.CharField(
        help_text="empty, ongoing, prepare_commit, prepare_abort, complete_commit or complete_abort"
    )
    producer_id = serializers.IntegerField()
    producer_epoch = serializers.IntegerField()
    timeout_ms = serializers.IntegerField(help_text="Its producer's transaction timeout.")
    started_ms = serializers.IntegerField(
        allow_null=True, help_text="When its open transaction began (ms); null: none open."
    )
    age_seconds = serializers.FloatField(allow_null=True, help_text="How long it has been open.")
    last_update_ms = serializers.IntegerField()
    coordinator_id = serializers.IntegerField(help_text="The broker coordinating it.")
    partitions = TxnPartitionSerializer(many=True, help_text="Those of its open transaction.")


class HalfMessageSerializer(serializers.Serializer[Any]):
    producer_group = serializers.CharField()
    half_id = serializers.CharField()
    tenant = serializers.CharField()
    topic = serializers.CharField()
    partition = serializers.IntegerField()
    state = serializers.CharField(
        help_text="ongoing (waiting for its outcome), prepare_* or complete_commit / "
        "complete_abort (rolled back)"
    )
    created_ms = serializers.IntegerField()
    age_seconds = serializers.FloatField()
    checks = serializers.IntegerField(help_text="Check-backs sent so far.")
    max_checks = serializers.IntegerField()
    next_check_ms = serializers.IntegerField(allow_null=True)
    default_outcome = serializers.CharField(help_text="commit or rollback, after max_checks")
    client_id = serializers.CharField(help_text="The producer that sent it.")
    resolved_by = serializers.CharField(
        help_text="producer, check-back, default or operator; empty while pending"
    )


class ResolveHalfMessageSerializer(serializers.Serializer[Any]):
    outcome = serializers.ChoiceField(choices=["commit", "rollback"])


class PartitionProducerSerializer(serializers.Serializer[Any]):
    producer_id = serializers.IntegerField()
    producer_epoch = serializers.IntegerField()
    last_sequence = serializers.IntegerField(help_text="-1: none kept")
    txn_first_offset = serializers.IntegerField(
        help_text="Where its open transaction on the partition began; -1: none open."
    )
    coordinator_epoch = serializers.IntegerField(help_text="Of its last marker there.")


class AbortedProducerSerializer(serializers.Serializer[Any]):
    txn_first_offset = serializers.IntegerField(help_text="Where the aborted transaction began.")
