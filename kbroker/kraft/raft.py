"""Raft for ``__cluster_metadata`` (Kafka's KRaft: KIP-595, KIP-630, KIP-996, KIP-853) as a
pure object: no I/O besides its RaftLog / QuorumStore / SnapshotStore, no awaits, no clock.

    node = RaftNode(node_id, log, store, config, rng, voters={1, 2, 3})
    outbound, next_deadline_ms = node.poll(now_ms, inbound_envelopes)
    last_offset = node.append([framed_record, ...], now_ms)     # leader only
    node.resign(now_ms)                                          # EndQuorumEpoch hand-over
    node.take_committed() -> [CommittedBatch | SnapshotLoaded]   # for the state machine

(Skeleton published for the ctrl helper; the implementation follows in this module.)
"""

from __future__ import annotations


class NotLeaderError(Exception):
    """append() on a node that is not the leader (or is resigning)."""


class RaftNode:  # pragma: no cover - filled in by the next commit
    node_id: int
    role: str          # "unattached" | "prospective" | "candidate" | "leader" | "follower" | "resigned"
    epoch: int
    leader_id: int     # -1 when unknown
    high_watermark: int
    voters: frozenset

    def poll(self, now_ms: int, inbound: list) -> tuple[list, int]:
        raise NotImplementedError

    def append(self, records: list[bytes], now_ms: int) -> int:
        raise NotImplementedError

    def resign(self, now_ms: int) -> None:
        raise NotImplementedError
