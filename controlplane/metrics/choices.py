from django.db import models


class SeriesKind(models.TextChoices):
    """What a series measures. A topic series holds ``records_per_s`` and ``bytes_per_s``
    produced; a group series (one per group and topic it committed offsets of) holds
    ``records_per_s`` consumed, ``lag_records`` and ``lag_s``; a mirror series (one
    per mirror link and leg: ``group`` is the link's ``<tenant>.<name>``, ``topic`` the
    leg, ``<from region>><to region>``) holds the leg's ``lag_records`` and ``lag_s``."""

    TOPIC = "topic"
    GROUP = "group"
    MIRROR = "mirror"
