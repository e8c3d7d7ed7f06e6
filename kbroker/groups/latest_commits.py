"""Latest-wins replay of plain offset commits while a __consumer_offsets partition loads.

A large offsets partition is mostly the same keys committed again and again (a group
commits every partition every few seconds). Replaying one of them only replaces the
previous value of its key, so the load keeps the raw value bytes of the last record per key
and decodes and replays just those, in the order of their last writes: the state the
replay of a compacted log gives, which Kafka's compaction relies on being the same.

Only plain (non-transactional) OffsetCommit records are held back. Anything else in the
log (group metadata, consumer-group records, transactional commits, markers) may read the
offsets a group has, so the held-back commits are replayed before it.
"""
from __future__ import annotations

import logging

from kbroker.groups import record_codec
from kbroker.groups.partitioning import OFFSETS_TOPIC

log = logging.getLogger("kbroker.groups.latest_commits")

REPLAYS_PER_STEP = 32     # held-back commits replayed between two pauses of a sliced load
# Held keys are replayed early past this many (checked after each batch), so a partition
# of millions of distinct keys does not hold all their bytes besides the loaded offsets.
MAX_HELD = 100_000


class LatestCommits:
    """The held-back commits of one load. The load's loop (runtime._load_steps, a million
    records in a large load) holds a record itself, with no call: ``held.pop(key, None);
    held[key] = value``, which keeps the keys in the order of their last writes."""

    def __init__(self, shard, partition: int) -> None:
        self.shard = shard
        self.partition = partition
        self.held: dict = {}          # key bytes -> value bytes (None: tombstone), last write last
        self.replayed = 0

    def replay_steps(self):
        """Generator: replays what is held, pausing every REPLAYS_PER_STEP records (it does
        not pause when nothing is held)."""
        held = list(self.held.items())
        self.held.clear()          # in place: the load's loop holds records into it directly
        replay = self.shard.replay
        decode = record_codec.decode
        for i, (key, value) in enumerate(held):
            if i % REPLAYS_PER_STEP == REPLAYS_PER_STEP - 1:
                yield
            try:
                rec = decode(key, value)
            except Exception:   # noqa: BLE001 - one bad record must not stop the load
                log.exception("%s-%d: undecodable offset commit skipped (key %r)",
                              OFFSETS_TOPIC, self.partition, bytes(key[:64]))
                continue
            replay(rec)
            self.replayed += 1
