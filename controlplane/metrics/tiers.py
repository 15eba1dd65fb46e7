"""The two tiers of stored points and the arithmetic of their blocks.

A tier keeps points of one resolution for a retention. Its points are stored in blocks:
one row per series and block (``slots`` consecutive points), each measure an array of
``slots`` float8 with lower bound 1, NULL where no point was written. Slot ``i`` (1-based)
of a block starting at ``start`` is the point of ``[start + (i-1)*resolution,
start + i*resolution)``.

- ``FINE``: 10-second points for an hour; a block spans a minute (6 points).
- ``COARSE``: 1-minute points for 7 days, rolled up from ``FINE``; a block spans an hour
  (60 points).

Why blocks (measured by ``bench/console.py``, figures in ``bench/README.md``): a row per
point is 10,080 live rows per series in the coarse tier (10^8 for 10,000 topics); a block
row is updated in place by one bulk statement per interval for every series. Why a
minute for the fine blocks: each update rewrites the whole row, so a short block keeps
the bytes written per interval near a row per point's, and a minute is also exactly
what one roll-up reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta


@dataclass(frozen=True)
class Tier:
    resolution_s: int
    retention: timedelta
    slots: int

    @property
    def block_s(self) -> int:
        return self.resolution_s * self.slots

    def block_start(self, at: datetime) -> datetime:
        """The start of the block holding the point of instant ``at``."""
        epoch = int(at.timestamp())
        return from_epoch(epoch - epoch % self.block_s)

    def slot(self, at: datetime) -> int:
        """The 1-based slot of ``at`` in its block."""
        return int(at.timestamp()) % self.block_s // self.resolution_s + 1

    def point_start(self, at: datetime) -> datetime:
        """The start of the point (the resolution interval) holding ``at``."""
        epoch = int(at.timestamp())
        return from_epoch(epoch - epoch % self.resolution_s)


FINE = Tier(10, timedelta(hours=1), slots=6)
COARSE = Tier(60, timedelta(days=7), slots=60)
TIERS = (FINE, COARSE)


def from_epoch(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def tier_for(since: datetime, now: datetime) -> Tier:
    """The finest tier still holding points from ``since``."""
    return FINE if since >= now - FINE.retention else COARSE
