"""Committed offsets of every group in one coordinator shard.

Group-level checks (generation, member epoch) happen in the shard before it calls in here;
this module only keeps offsets, validates sizes, and writes/replays OffsetCommit records.
Transactional offsets stay pending per producer until the transaction's marker is replayed,
which is what OffsetFetch(require_stable) waits on.
"""
from __future__ import annotations

from dataclasses import dataclass

from kbroker.groups import errors
from kbroker.groups.records import OffsetCommitRecord, OffsetValue

TopicPartition = tuple[str, int]


@dataclass
class CommitPartition:
    partition: int
    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""


@dataclass
class FetchedOffset:
    partition: int
    offset: int = -1
    leader_epoch: int = -1
    metadata: str | None = ""
    error: int = errors.NONE


class OffsetStore:
    def __init__(self, metadata_max_bytes: int = 4096):
        self.metadata_max_bytes = metadata_max_bytes
        self.offsets: dict[str, dict[TopicPartition, OffsetValue]] = {}
        # group -> producer id -> offsets waiting for the transaction's outcome
        self.pending_txn: dict[str, dict[int, dict[TopicPartition, OffsetValue]]] = {}

    # -- reads -------------------------------------------------------------------------------

    def has_offsets(self, group_id: str) -> bool:
        return bool(self.offsets.get(group_id)) or bool(self.pending_txn.get(group_id))

    def group_offsets(self, group_id: str) -> dict[TopicPartition, OffsetValue]:
        return self.offsets.get(group_id, {})

    def _is_pending(self, group_id: str, tp: TopicPartition) -> bool:
        return any(tp in offs for offs in self.pending_txn.get(group_id, {}).values())

    def fetch(self, group_id: str, topics: list[tuple[str, list[int]]] | None,
              require_stable: bool = False) -> list[tuple[str, list[FetchedOffset]]]:
        """Committed offsets; ``topics=None`` means every partition the group has committed."""
        committed = self.offsets.get(group_id, {})
        if topics is None:
            by_topic: dict[str, list[int]] = {}
            for t, p in sorted(committed):
                by_topic.setdefault(t, []).append(p)
            topics = list(by_topic.items())
        out = []
        for topic, partitions in topics:
            rows = []
            for p in partitions:
                if require_stable and self._is_pending(group_id, (topic, p)):
                    rows.append(FetchedOffset(p, error=errors.UNSTABLE_OFFSET_COMMIT))
                    continue
                v = committed.get((topic, p))
                rows.append(FetchedOffset(p) if v is None else
                            FetchedOffset(p, v.offset, v.leader_epoch, v.metadata))
            out.append((topic, rows))
        return out

    # -- writes ------------------------------------------------------------------------------

    def commit(self, group_id: str, topics: list[tuple[str, list[CommitPartition]]], now_ms: int,
               retention_ms: int = -1) -> tuple[list, list[tuple[str, list[tuple[int, int]]]]]:
        """Returns (records, [(topic, [(partition, error)])]); state changes on replay."""
        records, answer = [], []
        for topic, parts in topics:
            codes = []
            for cp in parts:
                metadata = cp.metadata if cp.metadata is not None else ""
                if len(metadata.encode()) > self.metadata_max_bytes:
                    codes.append((cp.partition, errors.OFFSET_METADATA_TOO_LARGE))
                    continue
                expire = now_ms + retention_ms if retention_ms is not None and retention_ms >= 0 else -1
                value = OffsetValue(cp.offset, cp.leader_epoch, metadata, now_ms, expire)
                records.append(OffsetCommitRecord(group_id, topic, cp.partition, value))
                codes.append((cp.partition, errors.NONE))
            answer.append((topic, codes))
        return records, answer

    def delete(self, group_id: str, partitions: list[TopicPartition]) -> list:
        have = self.offsets.get(group_id, {})
        return [OffsetCommitRecord(group_id, t, p, None) for t, p in partitions if (t, p) in have]

    def delete_all(self, group_id: str) -> list:
        return [OffsetCommitRecord(group_id, t, p, None) for t, p in self.offsets.get(group_id, {})]

    def expire(self, group_id: str, now_ms: int, retention_ms: int, base_of, keep_topic) -> list:
        """Tombstones for offsets past retention.

        ``base_of(value)`` gives the timestamp retention counts from (the commit, or when the
        group became empty); ``keep_topic(topic)`` protects topics the group still consumes.
        """
        out = []
        for (t, p), v in self.offsets.get(group_id, {}).items():
            if keep_topic(t) or self._is_pending(group_id, (t, p)):
                continue
            if v.expire_timestamp >= 0:
                expired = now_ms >= v.expire_timestamp
            else:
                expired = now_ms - base_of(v) >= retention_ms
            if expired:
                out.append(OffsetCommitRecord(group_id, t, p, None))
        return out

    # -- transactions ------------------------------------------------------------------------

    def replay_transactional(self, producer_id: int, record: OffsetCommitRecord) -> None:
        pending = self.pending_txn.setdefault(record.group, {}).setdefault(producer_id, {})
        if record.value is None:
            pending.pop((record.topic, record.partition), None)
        else:
            pending[(record.topic, record.partition)] = record.value

    def complete_transaction(self, producer_id: int, committed: bool) -> None:
        for group_id in list(self.pending_txn):
            offs = self.pending_txn[group_id].pop(producer_id, None)
            if not self.pending_txn[group_id]:
                del self.pending_txn[group_id]
            if committed and offs:
                self.offsets.setdefault(group_id, {}).update(offs)

    # -- replay ------------------------------------------------------------------------------

    def replay(self, record: OffsetCommitRecord) -> None:
        tp = (record.topic, record.partition)
        if record.value is None:
            group = self.offsets.get(record.group)
            if group is not None:
                group.pop(tp, None)
                if not group:
                    del self.offsets[record.group]
        else:
            self.offsets.setdefault(record.group, {})[tp] = record.value
