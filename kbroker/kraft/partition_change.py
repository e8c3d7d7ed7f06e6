"""Partition leadership changes the controller makes when brokers go away.

(The smallest correct rule, written by the ctrl helper so that fencing and controlled
shutdown can move leaders; the repl helper's fuller module — ISR changes, AlterPartition —
replaces this file and keeps ``move_off`` with the same meaning.)

Kafka's rule (ReplicationControlManager / PartitionChangeBuilder), for the brokers in
``leaving``: each is removed from every ISR it is in, unless it is the last member (an ISR
never becomes empty: the last member is the only replica known to hold every committed
record); a partition whose leader is leaving gets the first replica, in replica order, that is
in the new ISR, not leaving and not fenced; if there is none the partition has no leader (-1)
until one comes back. Every leader change bumps the leader epoch (the image does that on
replay of a PartitionChangeRecord with a leader).
"""

from __future__ import annotations

from kbroker.kraft.records import TYPE_BY_NAME, record_class

NO_LEADER = -1
NO_LEADER_CHANGE = -2


def move_off(image, leaving: set[int]) -> list:
    """PartitionChangeRecords that take ``leaving`` out of ISRs and leaderships."""
    Change = record_class(TYPE_BY_NAME["PartitionChangeRecord"])
    fenced = {b.broker_id for b in image.brokers.values() if b.fenced}
    out = []
    for t in image.topics_by_id.values():
        for p in t.partitions.values():
            if p.leader not in leaving and not leaving.intersection(p.isr):
                continue
            isr = [r for r in p.isr if r not in leaving] or p.isr[-1:]
            leader = NO_LEADER_CHANGE
            if p.leader in leaving or p.leader == NO_LEADER:
                cands = [r for r in p.replicas if r in isr and r not in leaving and r not in fenced]
                new = cands[0] if cands else NO_LEADER
                if new != p.leader:
                    leader = new
            new_isr = isr if isr != p.isr else None
            if new_isr is None and leader == NO_LEADER_CHANGE:
                continue
            out.append(Change(partition_id=p.partition_id, topic_id=t.topic_id, isr=new_isr, leader=leader))
    return out


def elect_where_leaderless(image, returning: int) -> list:
    """A broker that is unfenced again leads the partitions left without a leader whose ISR
    it is in (it was their last in-sync replica)."""
    Change = record_class(TYPE_BY_NAME["PartitionChangeRecord"])
    out = []
    for t in image.topics_by_id.values():
        for p in t.partitions.values():
            if p.leader == NO_LEADER and returning in p.isr:
                out.append(Change(partition_id=p.partition_id, topic_id=t.topic_id, leader=returning))
    return out
