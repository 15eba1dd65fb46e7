from django.db import models

from lanes.model import OrphanPolicy as _Policy


class OrphanPolicy(models.TextChoices):
    """Who reads a lane's records while no consumer of the lane is live for the topic
    (``lanes.model.OrphanPolicy``): the trunk's groups, or nobody until one comes."""

    TRUNK = _Policy.TRUNK.value
    HOLD = _Policy.HOLD.value
