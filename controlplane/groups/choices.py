from django.db import models


class ResetTarget(models.TextChoices):
    """Where a reset moves a group's committed offsets, per partition."""

    EARLIEST = "earliest"  # the log start
    LATEST = "latest"  # the high watermark: skip everything not yet consumed
    TIMESTAMP = "timestamp"  # the first record at or after a time (latest if none)
    OFFSET = "offset"  # an offset, kept within [earliest, latest]


# States in which a group has no member whose own commits would overwrite a reset.
STOPPED_STATES = frozenset({"Empty", "Dead"})
