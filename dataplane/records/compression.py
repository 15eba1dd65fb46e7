"""Record-block codecs of RecordBatch v2, framed exactly as Apache Kafka frames them.

gzip is an RFC 1952 stream (concatenated members are read as one, as Java's
``GZIPInputStream`` does); snappy is xerial framing (the magic ``82 'SNAPPY' 00``,
version 1 and compat 1 as int32, then blocks of an int32 length and a raw snappy block
of at most 32 KiB of input; a plain raw snappy block is also read, as Kafka and
kafka-python do); lz4 is one LZ4 frame of independent 64 KiB blocks without a stored
size; zstd is one or more zstd frames. Decompression never produces more than the
caller's limit, so a small batch cannot expand into a memory bomb.

Thread safety: every function may be called from any thread; the lz4 and zstd
decompression contexts, costly to create, are kept one per thread and reused.
"""

from __future__ import annotations

import contextlib
import enum
import gzip
import struct
import threading
import zlib
from collections.abc import Callable
from typing import Final

import cramjam
import lz4.frame
import zstandard

from dataplane.records.varint import read_uvarint

_SNAPPY_BLOCK_BYTES: Final = 32 * 1024
_XERIAL_MAGIC: Final = b"\x82SNAPPY\x00"
_XERIAL_HEADER: Final = _XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_ZSTD_MAX_RATIO_SHIFT: Final = 15  # an RLE block turns 4 input bytes into 128 KiB
_INT32: Final = struct.Struct(">i")
_LZ4_MAX_RATIO: Final = 256  # an LZ4 block cannot expand more than ~255-fold
_contexts = threading.local()


class Compression(enum.IntEnum):
    """The codec in attribute bits 0-2."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


def compress(codec: Compression, data: bytes) -> bytes:
    """``data`` compressed with ``codec`` (which must not be ``NONE``)."""
    return _COMPRESSORS[codec](data)


def decompress(codec: Compression, payload: memoryview, limit: int) -> bytes:
    """``payload`` decompressed; raises ``DecompressionLimitError`` past ``limit`` bytes
    and another of ``DECOMPRESSION_ERRORS`` when ``payload`` is not valid ``codec``."""
    return _DECOMPRESSORS[codec](payload, limit)


def _gunzip(payload: memoryview, limit: int) -> bytes:
    out = bytearray()
    rest: bytes | memoryview = payload
    while True:  # concatenated gzip members decode as one stream, as GZIPInputStream does
        inflater = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
        out += inflater.decompress(rest, limit + 1 - len(out))
        _check_limit(len(out), limit)
        if not inflater.eof:
            raise ValueError("gzip stream ends early")
        rest = inflater.unused_data
        if not rest:
            return bytes(out)


def _unsnappy(payload: memoryview, limit: int) -> bytes:
    if len(payload) < len(_XERIAL_HEADER) or bytes(payload[: len(_XERIAL_MAGIC)]) != _XERIAL_MAGIC:
        return _unsnappy_block(payload, limit)
    blocks = []
    pos, total = len(_XERIAL_HEADER), 0
    while pos < len(payload):
        (size,) = _INT32.unpack_from(payload, pos)
        pos += 4
        if size < 0 or pos + size > len(payload):
            raise ValueError(f"xerial block of {size} bytes overruns the payload")
        block = _unsnappy_block(payload[pos : pos + size], limit, total)
        total += len(block)
        blocks.append(block)
        pos += size
    return b"".join(blocks)


def _unsnappy_block(block: memoryview, limit: int, produced: int = 0) -> bytes:
    declared, _ = read_uvarint(block, 0, 5)  # the raw block's preamble: its size
    _check_limit(produced + declared, limit)
    return bytes(cramjam.snappy.decompress_raw(block))


def _unlz4(payload: memoryview, limit: int) -> bytes:
    decompressor = _lz4_context()
    # The output buffer is allocated at ``max_length`` up front: bound it by what the
    # payload can expand to, not only by the limit (64 MiB by default).
    bound = min(limit + 1, _LZ4_MAX_RATIO * len(payload) + 65_536)
    out: bytes = decompressor.decompress(payload, max_length=bound)
    _check_limit(len(out), limit)
    if not decompressor.eof or decompressor.unused_data:
        raise ValueError("lz4 payload is not exactly one whole frame")
    return out


def _unzstd(payload: memoryview, limit: int) -> bytes:
    """Decode zstd frames, with or without a content size, never past ``limit`` bytes.

    Input is fed in steps small enough that even a maximal-ratio step cannot overshoot
    the remaining budget, and a frame must reach its end (zstandard's stream reader
    silently accepts a truncated one).
    """
    context = _zstd_context()
    declared = zstandard.frame_content_size(payload)
    if 0 <= declared <= limit:  # one frame that says its size: decoded in one call
        with contextlib.suppress(zstandard.ZstdError):  # more frames: stream them below
            return context.decompress(payload, allow_extra_data=False)
    out = bytearray()
    pos = 0
    while True:
        decompressor = context.decompressobj()
        while not decompressor.eof:
            if pos >= len(payload):
                raise ValueError("zstd frame ends early")
            step = max(256, (limit - len(out)) >> _ZSTD_MAX_RATIO_SHIFT)
            out += decompressor.decompress(payload[pos : pos + step])
            _check_limit(len(out), limit)
            pos = min(pos + step, len(payload))
        pos -= len(decompressor.unused_data)
        if pos >= len(payload):
            return bytes(out)


def _lz4_context() -> lz4.frame.LZ4FrameDecompressor:
    context = getattr(_contexts, "lz4", None)
    if context is None:
        context = _contexts.lz4 = lz4.frame.LZ4FrameDecompressor()
    else:
        context.reset()
    return context


def _zstd_context() -> zstandard.ZstdDecompressor:
    context = getattr(_contexts, "zstd", None)
    if context is None:
        context = _contexts.zstd = zstandard.ZstdDecompressor()
    return context


class DecompressionLimitError(ValueError):
    """The records would decompress to more than ``limit`` bytes (a bomb, or too big)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"records decompress to more than {limit} bytes")
        self.limit = limit


def _check_limit(size: int, limit: int) -> None:
    if size > limit:
        raise DecompressionLimitError(limit)


# What the codec libraries raise on bad input, and what our framing checks raise.
DECOMPRESSION_ERRORS: Final = (
    ValueError,
    IndexError,
    RuntimeError,
    struct.error,
    zlib.error,
    cramjam.DecompressionError,
    zstandard.ZstdError,
)
_DECOMPRESSORS: Final[dict[Compression, Callable[[memoryview, int], bytes]]] = {
    Compression.GZIP: _gunzip,
    Compression.SNAPPY: _unsnappy,
    Compression.LZ4: _unlz4,
    Compression.ZSTD: _unzstd,
}


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data, compresslevel=6, mtime=0)  # Java's default level


def _snappy(data: bytes) -> bytes:
    parts = [_XERIAL_HEADER]
    with memoryview(data) as view:
        for start in range(0, len(data), _SNAPPY_BLOCK_BYTES):
            block = bytes(cramjam.snappy.compress_raw(view[start : start + _SNAPPY_BLOCK_BYTES]))
            parts += (_INT32.pack(len(block)), block)
    return b"".join(parts)


def _lz4(data: bytes) -> bytes:
    # The frame Kafka's own KafkaLZ4BlockOutputStream writes: no linked blocks, no sizes.
    return lz4.frame.compress(  # type: ignore[no-any-return]
        data,
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        store_size=False,
    )


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor(level=3).compress(data)  # Kafka's default level


_COMPRESSORS: Final[dict[Compression, Callable[[bytes], bytes]]] = {
    Compression.GZIP: _gzip,
    Compression.SNAPPY: _snappy,
    Compression.LZ4: _lz4,
    Compression.ZSTD: _zstd,
}
