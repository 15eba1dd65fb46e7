"""Kafka-style replication of partitions between brokers.

``state`` (a partition's role, ISR and followers' progress), ``manager`` (applying the
controller's push: roles, the leader's high watermark and ISR proposals), ``leader``
(answering ``Replication.ReplicaFetch``) and ``follower`` (pulling from leaders).
"""
