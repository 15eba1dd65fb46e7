"""The consumer's RecordBatch v2 reader: fetched bytes to ``ConsumerRecord`` s, fast.

Two steps, so the expensive one runs only for records the application takes:

- ``split_batches`` (fetcher thread): walks the batch headers of a fetch result,
  checks length, magic and CRC-32C, skips batches wholly before the fetch offset and
  decompresses the others; an uncompressed batch is not copied (its records are read in
  place from the response bytes).
- ``drop_aborted`` (fetcher thread): the batches of aborted transactions (Kafka's
  read_committed rules, from the broker's list of aborted transactions) become empty
  control batches, so ``poll`` steps over them as over a marker.
- ``decode_records`` (``poll``): the codec's lazy loop (``dataplane.records.decoder.
  decode_lazy``) builds ``ConsumerRecord`` s: keys and values sliced once, headers kept
  as a lazy reader decoded on first access, records below the consumer's position
  skipped without building them, a dense batch read by its faster path.

The layout is the codec's (``dataplane.records.layout``, Kafka's); tests prove the
records equal ``decoder.decode_batch`` and kafka-python's on every codec.
"""

from __future__ import annotations

from collections.abc import Iterable

from crc32c import crc32c

from dataplane.client.types import ConsumerRecord, Headers, RecordSource
from dataplane.errors import ErrorCode, MeridianError
from dataplane.records.compression import DECOMPRESSION_ERRORS, Compression, decompress
from dataplane.records.decoder import FetchedBatch, LazyHeaders, decode_lazy
from dataplane.records.errors import CorruptBatchError, RecordCountMismatchError
from dataplane.records.layout import (
    ATTRIBUTES_OFFSET,
    COMPRESSION_MASK,
    CONTROL_MASK,
    HEADER_SIZE,
    HEADER_STRUCT,
    LOG_OVERHEAD,
    MAGIC,
    MAX_UNCOMPRESSED_BYTES,
    TRANSACTIONAL_MASK,
)


def corrupt(tp: tuple[str, int], offset: int, what: str) -> MeridianError:
    return MeridianError(
        ErrorCode.CORRUPT_MESSAGE, f"{tp[0]}/{tp[1]}: the batch at offset {offset} {what}"
    )


def split_batches(
    data: bytes, fetch_offset: int, tp: tuple[str, int], *, verify_crc: bool = True
) -> list[FetchedBatch]:
    """The whole batches of ``data`` that end at or after ``fetch_offset``.

    A partial batch at the end (a fetch cut by its byte limit) is left out. Raises
    ``CORRUPT_MESSAGE`` for a bad length, magic, CRC or compressed block.
    """
    batches: list[FetchedBatch] = []
    position, size = 0, len(data)
    view = memoryview(data)
    while position + HEADER_SIZE <= size:
        fields = HEADER_STRUCT.unpack_from(data, position)
        base, length, magic, crc, delta = fields[0], fields[1], fields[3], fields[4], fields[6]
        end = position + LOG_OVERHEAD + length
        if length < HEADER_SIZE - LOG_OVERHEAD or magic != MAGIC:
            raise corrupt(tp, base, f"has length {length} and magic {magic}")
        if end > size:
            break
        if base + delta >= fetch_offset:
            if verify_crc and crc32c(view[position + ATTRIBUTES_OFFSET : end]) != crc:
                raise corrupt(tp, base, "fails its CRC-32C check")
            batches.append(_batch(data, view, position + HEADER_SIZE, end, tp, fields))
        position = end
    return batches


def _batch(
    data: bytes,
    view: memoryview,
    start: int,
    end: int,
    tp: tuple[str, int],
    fields: tuple[int, ...],
) -> FetchedBatch:
    base, epoch, attributes, delta, base_ts, max_ts, pid, count = (
        fields[0], fields[2], fields[5], fields[6], fields[7], fields[8], fields[9], fields[12]
    )  # fmt: skip
    codec = attributes & COMPRESSION_MASK
    if codec != Compression.NONE:
        if codec > Compression.ZSTD:
            raise corrupt(tp, base, f"uses unknown codec {codec}")
        try:
            data = decompress(Compression(codec), view[start:end], MAX_UNCOMPRESSED_BYTES)
        except DECOMPRESSION_ERRORS as err:
            raise corrupt(tp, base, f"does not decompress: {err}") from None
        start, end = 0, len(data)
    return FetchedBatch(
        base, base + delta, base_ts, max_ts, attributes, epoch, count, data, start, end, pid
    )


def drop_aborted(
    batches: list[FetchedBatch], aborted: Iterable[tuple[int, int]]
) -> list[FetchedBatch]:
    """``batches`` with those of aborted transactions (``aborted``: (producer id, first
    offset) pairs, as the broker lists them) replaced by empty control batches, Kafka's
    read_committed rule: a producer's transaction counts as aborted from its first
    offset on, and its batches are skipped until its next control batch."""
    pending = sorted(aborted, key=lambda entry: entry[1], reverse=True)
    if not pending:
        return batches
    skipping: set[int] = set()
    kept: list[FetchedBatch] = []
    for batch in batches:
        while pending and pending[-1][1] <= batch.last_offset:
            skipping.add(pending.pop()[0])
        if batch.attributes & CONTROL_MASK:
            skipping.discard(batch.producer_id)
        elif batch.attributes & TRANSACTIONAL_MASK and batch.producer_id in skipping:
            batch = FetchedBatch(
                batch.base_offset, batch.last_offset, batch.base_timestamp,
                batch.max_timestamp, batch.attributes | CONTROL_MASK, batch.leader_epoch, 0,
                b"", 0, 0, batch.producer_id,
            )  # fmt: skip
        kept.append(batch)
    return kept


def decode_records(
    batch: FetchedBatch, source: RecordSource, min_offset: int = 0
) -> list[ConsumerRecord]:
    """The records of ``batch`` at or after ``min_offset`` (``decoder.decode_lazy``).

    Raises ``CORRUPT_MESSAGE`` when a record overruns the batch, has a negative length
    other than -1 or a negative offset delta, or the batch holds another number of
    records than its header says.
    """
    try:
        return decode_lazy(batch, ConsumerRecord, source, min_offset, _Headers)
    except RecordCountMismatchError as err:
        found = f"holds {err.present} of {err.declared} records"
        raise corrupt(source[:2], batch.base_offset, found) from None
    except CorruptBatchError as err:
        raise corrupt(source[:2], batch.base_offset, f"has a bad record: {err.reason}") from None


class _Headers(LazyHeaders):
    """A consumed record's header block; a malformed one is ``CORRUPT_MESSAGE``."""

    __slots__ = ()

    def decode(self) -> Headers:
        try:  # plain pairs, as ConsumerRecord's own headers are
            return tuple((key, value) for key, value in super().decode())
        except (IndexError, ValueError) as err:
            raise MeridianError(ErrorCode.CORRUPT_MESSAGE, f"bad record headers: {err}") from None
