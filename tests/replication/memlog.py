"""An in-memory replica of one partition for the simulations: the same surface the
replication state machines use on a real ``Partition`` (log end, epochs, truncation, the
high watermark), with records as (epoch, value) pairs."""

from __future__ import annotations

from kbroker.log.checkpoint import LeaderEpochCache


class MemReplica:
    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.entries: list[tuple[int, int]] = []   # offset = index: (leader epoch, value)
        self.cache = LeaderEpochCache(None)
        self.hw = 0
        self.log_start_offset = 0
        self.hw_went_back = None                    # (old, new) the first time it happens
        self.truncated = 0                          # records dropped by truncation
        # role fields (kbroker.replication.roles)
        self.leader_id = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.leader_state = None

    # -- the replica surface -----------------------------------------------------------------

    @property
    def log_end_offset(self) -> int:
        return len(self.entries)

    @property
    def latest_epoch(self) -> int:
        return self.cache.latest_epoch

    @property
    def high_watermark(self) -> int:
        return self.hw

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.cache.end_offset_for(epoch, self.log_end_offset)

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        self.cache.assign(epoch, start_offset)

    def advance_high_watermark(self, offset: int) -> bool:
        new = min(offset, self.log_end_offset)
        if new > self.hw:
            self.hw = new
            return True
        return False

    def append_as_leader(self, value: int) -> int:
        off = self.log_end_offset
        self.cache.assign(self.leader_epoch, off)
        self.entries.append((self.leader_epoch, value))
        return off

    def append_as_follower(self, records, now_ms: int) -> None:
        for off, epoch, value in records:
            assert off == self.log_end_offset, (off, self.log_end_offset)
            self.cache.assign(epoch, off)
            self.entries.append((epoch, value))

    def truncate_to(self, offset: int, now_ms: int) -> bool:
        if offset >= self.log_end_offset:
            self.cache.truncate_from_end(self.log_end_offset)  # an epoch begun but never written
            return False
        self.truncated += len(self.entries) - offset
        del self.entries[offset:]
        self.cache.truncate_from_end(offset)
        if self.hw > offset and self.hw_went_back is None:
            self.hw_went_back = (self.hw, offset)
        self.hw = min(self.hw, offset)
        return True

    def truncate_fully_and_start_at(self, offset: int, now_ms: int) -> None:
        raise AssertionError("no retention in the simulation: the log start never moves")

    def read(self, offset: int, max_records: int) -> list[tuple[int, int, int]]:
        end = min(self.log_end_offset, offset + max_records)
        return [(o, self.entries[o][0], self.entries[o][1]) for o in range(offset, end)]

    def values(self) -> list[int]:
        return [v for _, v in self.entries]
