"""Errors only the SDK raises; all are ``MeridianError`` subclasses with a code."""

from __future__ import annotations

from dataplane.errors import ErrorCode, MeridianError


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
