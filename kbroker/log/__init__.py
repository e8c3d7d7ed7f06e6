"""The segment log: Kafka's on-disk format, recovery, retention, compaction.

See DEVELOPERS.md ("partition log" contract)."""

from .config import LogConfig
from .errors import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    KafkaStorageError,
    LogError,
    OffsetOutOfRangeError,
    RecordBatchTooLargeError,
    RecordTooLargeError,
)
from .log_manager import LogManager
from .partition_log import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    AppendInfo,
    PartitionLog,
    ReadResult,
    RecoveryReport,
    TimestampAndOffset,
)
from .segment import FileRegion

__all__ = [
    "LogConfig",
    "LogManager",
    "PartitionLog",
    "AppendInfo",
    "ReadResult",
    "FileRegion",
    "TimestampAndOffset",
    "RecoveryReport",
    "LogError",
    "CorruptRecordError",
    "InvalidRecordError",
    "InvalidTimestampError",
    "KafkaStorageError",
    "OffsetOutOfRangeError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "EARLIEST_TIMESTAMP",
    "LATEST_TIMESTAMP",
    "MAX_TIMESTAMP",
]
