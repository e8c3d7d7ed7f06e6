"""``replication-offset-checkpoint``: each log dir's partitions' high watermarks (Kafka's
file and format), read once per dir at start-up and written periodically and at shutdown.
A restarted follower starts from it instead of its log end: its log may hold a tail that
was never committed."""

from __future__ import annotations

import logging
import os

from kbroker.log.checkpoint import CheckpointError, OffsetCheckpointFile, write_offsets

log = logging.getLogger("kbroker.replicas")

HW_CHECKPOINT = "replication-offset-checkpoint"


class HighWatermarkCheckpoints:
    def __init__(self) -> None:
        self._read: dict[str, dict[tuple[str, int], int]] = {}

    def recovered(self, log_dir: str, topic: str, partition: int) -> int:
        offsets = self._read.get(log_dir)
        if offsets is None:
            try:
                offsets = OffsetCheckpointFile(os.path.join(log_dir, HW_CHECKPOINT)).read()
            except (CheckpointError, OSError) as e:
                log.warning("ignoring unreadable %s in %s: %s", HW_CHECKPOINT, log_dir, e)
                offsets = {}
            self._read[log_dir] = offsets
        return offsets.get((topic, partition), 0)

    def write(self, by_dir: dict[str, dict[tuple[str, int], int]]) -> None:
        """by_dir: log dir -> {(topic, partition): high watermark}, handed over (not copied)."""
        for d, offsets in by_dir.items():
            write_offsets(d, HW_CHECKPOINT, offsets)   # on the log dir's IO thread, if it has one
            self._read[d] = offsets
