"""Exceptions raised by the log layer.

Each exception names the Kafka error the broker should answer with in its
``error`` class attribute (a name from ``errors.tsv``, e.g. ``"CORRUPT_MESSAGE"``);
``error_code`` resolves it through ``kbroker.wire.errors.Errors`` when that exists.
Handlers map them with ``Errors[exc.error]``.
"""

from __future__ import annotations


class LogError(Exception):
    """Base class of everything the log layer raises on purpose."""

    error = "UNKNOWN_SERVER_ERROR"

    @property
    def error_code(self) -> int:
        try:
            from kbroker.wire.errors import Errors  # generated; may not exist yet
        except ImportError:  # pragma: no cover - depends on the codec landing
            return _FALLBACK_CODES.get(self.error, -1)
        return int(Errors[self.error])


class CorruptRecordError(LogError):
    """A batch failed validation: bad CRC, bad length, torn batch (CORRUPT_MESSAGE)."""

    error = "CORRUPT_MESSAGE"


class InvalidRecordError(LogError):
    """A batch is well formed but not acceptable (INVALID_RECORD). ``record_errors`` lists
    ``(record index, message or None)`` of the records that made the append fail (Kafka's
    RecordValidationException: Produce v8+ answers them in ``record_errors``)."""

    error = "INVALID_RECORD"

    def __init__(self, message: str = "", record_errors: list[tuple[int, str | None]] | None = None) -> None:
        super().__init__(message)
        self.record_errors = record_errors or []


class UnsupportedMessageFormatError(LogError):
    """Magic other than 2 (UNSUPPORTED_FOR_MESSAGE_FORMAT)."""

    error = "UNSUPPORTED_FOR_MESSAGE_FORMAT"


class RecordTooLargeError(LogError):
    """One batch is larger than max.message.bytes (MESSAGE_TOO_LARGE)."""

    error = "MESSAGE_TOO_LARGE"


class RecordBatchTooLargeError(LogError):
    """The records of one append exceed segment.bytes (RECORD_LIST_TOO_LARGE)."""

    error = "RECORD_LIST_TOO_LARGE"


class InvalidTimestampError(LogError):
    """A timestamp outside message.timestamp.before/after.max.ms (INVALID_TIMESTAMP)."""

    error = "INVALID_TIMESTAMP"


class OffsetOutOfRangeError(LogError):
    """Fetch/DeleteRecords offset outside [log start, log end] (OFFSET_OUT_OF_RANGE)."""

    error = "OFFSET_OUT_OF_RANGE"


class KafkaStorageError(LogError):
    """An I/O error, or the log was closed/deleted underneath (KAFKA_STORAGE_ERROR)."""

    error = "KAFKA_STORAGE_ERROR"


class InvalidConfigError(LogError, ValueError):
    """A topic config value that cannot be parsed or is out of range (INVALID_CONFIG)."""

    error = "INVALID_CONFIG"


_FALLBACK_CODES = {
    "UNKNOWN_SERVER_ERROR": -1,
    "OFFSET_OUT_OF_RANGE": 1,
    "CORRUPT_MESSAGE": 2,
    "MESSAGE_TOO_LARGE": 10,
    "RECORD_LIST_TOO_LARGE": 18,
    "INVALID_TIMESTAMP": 32,
    "INVALID_CONFIG": 40,
    "UNSUPPORTED_FOR_MESSAGE_FORMAT": 43,
    "KAFKA_STORAGE_ERROR": 56,
    "INVALID_RECORD": 87,
}
