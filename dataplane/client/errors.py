"""Errors only the SDK raises; all are ``MeridianError`` subclasses with a code."""

from __future__ import annotations

from dataplane.errors import ErrorCode, MeridianError
from lanes import split_topic


class ConfigError(MeridianError, ValueError):
    """A client setting is invalid; raised by the constructor, before anything connects."""

    def __init__(self, message: str, code: int = ErrorCode.INVALID_CONFIG) -> None:
        super().__init__(code, message)


class BufferFullError(MeridianError):
    """The producer's ``buffer_memory`` is taken by records not yet acknowledged.

    Raised by ``send`` at once when ``block_on_full`` is off, else after ``max_block_ms``.
    Retriable: the buffer drains as the brokers acknowledge.
    """

    def __init__(self, message: str) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message)


BufferFull = BufferFullError


class LaneNotFoundError(MeridianError):
    """A record routed to a lane the topic's tenant does not declare (or whose lane does
    not cover the topic): ``LANE_NOT_FOUND``, fatal for those records only. ``lane`` and
    ``topic`` (the trunk topic) name what was refused; nothing went to the trunk."""

    def __init__(self, lane: str, topic: str, detail: str = "") -> None:
        message = f"lane {lane!r} of topic {topic!r} is not declared"
        super().__init__(ErrorCode.LANE_NOT_FOUND, f"{message}: {detail}" if detail else message)
        self.lane = lane
        self.topic = topic

    @classmethod
    def of_lane_topic(cls, lane_topic: str, detail: str = "") -> LaneNotFoundError:
        trunk, lane = split_topic(lane_topic)
        return cls(lane or "", trunk, detail)
