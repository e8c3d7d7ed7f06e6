"""Leader or follower, as the metadata says (PartitionRecord / PartitionChangeRecord).

``apply_partition_state`` moves one local replica to the role the image gives it, with
Kafka's rules: a leader epoch only goes up (an older one is ignored); becoming leader
starts the new epoch at the local log end in the leader-epoch cache (so a follower that
fetched a deposed leader's uncommitted tail is told to truncate it: KIP-279) and starts
tracking the followers afresh; an ISR change under the same leader epoch only updates the
leader's view (the high watermark may then move). Pure apart from the replica's own
methods; the replica manager and the simulations both call it.

The replica is any object with the fields ``leader_id``, ``leader_epoch``,
``partition_epoch``, ``replicas``, ``isr``, ``leader_state`` and the methods
``assign_epoch(epoch, start_offset)``, ``advance_high_watermark(offset)``, with
``log_end_offset`` and ``high_watermark`` (kbroker.replication.partition.Partition).
"""

from __future__ import annotations

from enum import Enum

from kbroker.replication.leader_state import FollowerProgress, LeaderState


class RoleChange(Enum):
    NONE = "none"
    BECAME_LEADER = "became-leader"
    BECAME_FOLLOWER = "became-follower"   # or followed a new leader / epoch
    ISR_CHANGED = "isr-changed"
    STALE = "stale"                       # an older epoch than this replica knows
    REMOVED = "removed"                   # the topic was deleted: stop leading and fetching


def apply_partition_state(replica, local_id: int, leader: int, leader_epoch: int,
                          partition_epoch: int, replicas, isr, now_ms: int) -> RoleChange:
    if leader_epoch < replica.leader_epoch or (
            leader_epoch == replica.leader_epoch and partition_epoch < replica.partition_epoch):
        return RoleChange.STALE
    new_epoch = leader_epoch > replica.leader_epoch or leader != replica.leader_id
    replica.replicas = list(replicas)
    replica.isr = list(isr)
    replica.partition_epoch = partition_epoch
    if leader == local_id:
        if new_epoch or replica.leader_state is None:
            replica.leader_id = leader
            replica.leader_epoch = leader_epoch
            leo = replica.log_end_offset
            replica.assign_epoch(leader_epoch, leo)
            replica.leader_state = LeaderState.become_leader(
                local_id, replicas, isr, leader_epoch, partition_epoch, leo,
                replica.high_watermark, now_ms)
            replica.advance_high_watermark(replica.leader_state.high_watermark(leo))
            return RoleChange.BECAME_LEADER
        ls = replica.leader_state
        ls.replicas = tuple(replicas)
        for r in replicas:
            if r != local_id and r not in ls.followers:
                ls.followers[r] = FollowerProgress(r, last_caught_up_ms=now_ms)
        for r in list(ls.followers):
            if r not in replicas:
                del ls.followers[r]
        ls.on_partition_state(isr, partition_epoch)
        replica.advance_high_watermark(ls.high_watermark(replica.log_end_offset))
        return RoleChange.ISR_CHANGED
    was_leader = replica.leader_state is not None
    replica.leader_state = None
    replica.leader_id = leader
    replica.leader_epoch = leader_epoch
    if new_epoch or was_leader:
        return RoleChange.BECAME_FOLLOWER
    return RoleChange.NONE
