from django.db import models

from controlplane.core.choices import ProvisioningStatus

TopicStatus = ProvisioningStatus


class Durability(models.TextChoices):
    ALWAYS = "always"
    INTERVAL = "interval"
    NEVER = "never"


class DriftKind(models.TextChoices):
    """What the reconciler found: a desired partition missing on its broker (healed),
    a partition whose config differs (healed), one no topic wants (reported only), or
    a replica whose role or leader epoch is not the controller's (reported only: the
    controller's next push is what corrects it), a partition whose ``topic_id`` on the
    broker is another topic's (reported only: an id is set once), one tiered on the
    broker while its topic is not (reported only: brokers never turn tiering off), and
    a leader whose uploads to the object store are behind (reported only)."""

    MISSING = "missing"
    CONFIG = "config"
    UNKNOWN = "unknown"
    ROLE = "role"
    IDENTITY = "identity"
    REMOTE_STORAGE = "remote_storage"
    UPLOAD_LAG = "upload_lag"


class AclOperation(models.TextChoices):
    """What a topic ACL entry allows its principal (brokers' operations): write
    records, read them and commit offsets, alter and delete the topic."""

    PRODUCE = "produce"
    CONSUME = "consume"
    ADMIN = "admin"
