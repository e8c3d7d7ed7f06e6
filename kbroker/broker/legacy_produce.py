"""Produce v0-v2: up-convert a legacy message set (magic 0/1) to one v2 record batch.

Old producers (Produce v0/v1 send magic 0, v2 sends magic 1) write message sets: one
message per record, or one compressed "wrapper" message whose value is a whole inner message
set. Kafka's LogValidator converts them on append to the log's format (magic 2); we do the
same before the ordinary append path, which then assigns offsets and, on LogAppendTime
topics, the append time (``PartitionLog.append``).

What Kafka does, and so what this does:

* every outer message: size <= max.message.bytes (MESSAGE_TOO_LARGE), then its CRC32
  (CORRUPT_MESSAGE), before anything else (UnifiedLog.analyzeAndValidateRecords);
* all outer messages have the first one's magic, and a compressed set is exactly one
  wrapper (INVALID_RECORD);
* a wrapper must be gzip, snappy or lz4 (zstd needs magic 2), with a non-null value, a
  non-empty inner set, uncompressed inner messages of the wrapper's magic, and under magic 1
  a last offset that is 0 or >= the last inner offset (INVALID_RECORD); every inner message's
  CRC32 is checked (CORRUPT_MESSAGE);
* per record: a key on compacted topics (INVALID_RECORD); on CreateTime topics a timestamp
  other than -1 within message.timestamp.before/after.max.ms, and a producer may not claim
  LogAppendTime (INVALID_TIMESTAMP). A batch's INVALID_TIMESTAMP wins over INVALID_RECORD.

The result is one v2 batch, compressed with the producer's codec (compression.type is
"producer": a wrapper's codec is kept, re-compressed in the v2 format), offsets
consecutive from 0 (inner offsets, relative or absolute, are dropped; the log assigns the
real ones), no producer id, no headers. Record timestamps: magic 0 has none (-1, as Kafka's
NO_TIMESTAMP); magic 1 keeps each message's, or the wrapper's when the wrapper says
LogAppendTime. On LogAppendTime topics the log stamps the batch with the append time.
"""

from __future__ import annotations

from kbroker.log.errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    RecordTooLargeError,
)
from kbroker.wire import records as _records
from kbroker.wire.compression import ZSTD
from kbroker.wire.records import NO_TIMESTAMP, BatchBuilder, iter_batches

__all__ = ["is_legacy", "up_convert"]

_LEGACY_CODECS = (1, 2, 3)  # gzip, snappy, lz4: what magic 0/1 allowed


def is_legacy(buf) -> bool:
    """Whether ``buf`` starts with a magic 0/1 message (the magic byte is byte 16)."""
    return len(buf) >= 17 and buf[16] < 2


def up_convert(buf, config, now_ms: int, api_version: int = 2) -> bytearray:
    """The legacy message set ``buf`` as one v2 batch (writable, base offset 0), validated
    as Kafka validates a produce of it to a topic with LogConfig ``config``. Raises a
    ``kbroker.log.errors.LogError`` (``.error_code``) when Kafka would refuse it, and
    INVALID_RECORD for Produce v3+ (magic 2 only, as Kafka's ProduceRequest.validateRecords)."""
    if api_version >= 3:
        raise InvalidRecordError(f"Produce requests with version {api_version} are only allowed to "
                                 "contain record batches with magic version 2")
    # 1. the shallow pass: framing, size, CRC of every outer message
    try:
        outer = list(iter_batches(buf, legacy=True))
    except _records.CorruptRecordError as e:  # truncated, bad size or length
        raise CorruptRecordError(f"invalid legacy message set: {e}") from None
    if not outer:
        raise InvalidRecordError("produce request has no message")
    codec = 0
    for m in outer:
        if m.size > config.max_message_bytes:
            raise RecordTooLargeError(
                f"The record batch size in the append is {m.size} bytes which exceeds the "
                f"maximum configured value of {config.max_message_bytes}.")
        if not m.verify_crc():
            raise CorruptRecordError(f"Record is corrupt (stored crc = {m.crc})")
        if m.compression:
            codec = m.compression
    # 2. the validator: one wrapper when compressed, every message of the first's magic
    first = outer[0]
    if codec and len(outer) > 1:
        raise InvalidRecordError("Compressed outer record has more than one batch")
    for m in outer:
        if m.magic != first.magic:
            raise InvalidRecordError(
                f"Batch magic {m.magic} is not the same as the first batch's magic byte {first.magic}")
    # 3. per record
    cfg_lat = config.log_append_time
    builder = BatchBuilder(compression=codec)
    if codec:
        wrapper = first
        _check_wrapper(wrapper)
        try:
            inner = wrapper.inner_messages()
        except _records.CorruptRecordError as e:
            raise CorruptRecordError(f"invalid compressed message set: {e}") from None
        if not inner:
            raise InvalidRecordError("Found invalid compressed record set with no inner records")
        if wrapper.magic == 1 and wrapper.last_offset != 0 and wrapper.last_offset < inner[-1].last_offset:
            raise InvalidRecordError(
                f"Found invalid wrapper offset in compressed v1 message set, wrapper offset "
                f"'{wrapper.last_offset}' is less than the last inner message offset "
                f"'{inner[-1].last_offset}' and it is not zero.")
        wrapper_lat = wrapper.timestamp_type == _records.LOG_APPEND_TIME
        errors = []
        for i, m in enumerate(inner):
            if m.compression:
                errors.append((InvalidRecordError, f"record {i}: Compressed outer record should not "
                               "have an inner record with a compression attribute set"))
                continue
            if m.magic != wrapper.magic:
                errors.append((InvalidRecordError, f"record {i}: magic {m.magic} does not match "
                               f"outer magic {wrapper.magic}"))
                continue
            if not m.verify_crc():
                raise CorruptRecordError(f"Record {i} of the compressed message set is corrupt "
                                         f"(stored crc = {m.crc})")
            ts = NO_TIMESTAMP if m.magic == 0 else (wrapper.timestamp if wrapper_lat else m.timestamp)
            err = _check_record(i, m.key, ts, wrapper_lat, config, cfg_lat, now_ms)
            if err:
                errors.append(err)
            elif not errors:
                builder.append(key=_b(m.key), value=_b(m.value), timestamp=ts)
        _raise_record_errors(errors)
    else:
        for i, m in enumerate(outer):
            lat = m.timestamp_type == _records.LOG_APPEND_TIME
            ts = m.timestamp  # NO_TIMESTAMP under magic 0
            err = _check_record(i, m.key, ts, lat, config, cfg_lat, now_ms)
            _raise_record_errors([err] if err else [])
            builder.append(key=_b(m.key), value=_b(m.value), timestamp=ts)
    return bytearray(builder.build())


def _check_wrapper(w) -> None:
    c = w.compression
    if c == ZSTD:
        raise InvalidRecordError("zstd compression is not allowed with message format v0/v1")
    if c not in _LEGACY_CODECS:
        raise InvalidRecordError(f"unknown compression codec {c}")
    if w.value is None:
        raise InvalidRecordError(f"Found invalid compressed record set with null value (magic = {w.magic})")


def _check_record(i, key, ts, batch_lat, config, cfg_lat, now_ms):
    """Kafka's validateKey + validateTimestamp: an (error class, message) or None."""
    if config.compact and key is None:
        return (InvalidRecordError, f"record {i}: Compacted topic cannot accept message without key")
    if not cfg_lat and ts != NO_TIMESTAMP:
        before, after = config.timestamp_before_max_ms, config.timestamp_after_max_ms
        if now_ms - ts > before or ts - now_ms > after:
            return (InvalidTimestampError, f"record {i}: Timestamp {ts} is out of range. The "
                    f"timestamp should be within [{now_ms - before}, {now_ms + after}]")
    elif batch_lat:
        return (InvalidTimestampError, f"record {i}: Invalid timestamp type. Producer should not "
                "set timestamp type to LogAppendTime.")
    return None


def _raise_record_errors(errors) -> None:
    if not errors:
        return
    if any(cls is InvalidTimestampError for cls, _ in errors):
        raise InvalidTimestampError("One or more records have been rejected due to invalid timestamp: "
                                    + "; ".join(msg for _, msg in errors[:3]))
    raise InvalidRecordError(f"One or more records have been rejected due to {len(errors)} record "
                             "errors in total, and only showing the first three errors at most: "
                             + "; ".join(msg for _, msg in errors[:3]))


def _b(view):
    return None if view is None else bytes(view)

