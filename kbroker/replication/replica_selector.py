"""Fetch from the closest replica (KIP-392): with ``replica.selector.class`` =
RackAwareReplicaSelector, a leader tells a consumer whose ``client.rack`` matches an in-sync
follower's ``broker.rack`` to read from that follower (``preferred_read_replica``); followers
serve such reads up to their own high watermark."""

from __future__ import annotations

RACK_AWARE = "org.apache.kafka.common.replica.RackAwareReplicaSelector"


def preferred_read_replica(selector_class: str | None, client_rack: str, leader_id: int,
                           replicas, isr, rack_of: dict[int, str | None],
                           live: set[int]) -> int:
    """The replica a consumer should read from, or -1 for the leader itself."""
    if not selector_class or not client_rack:
        return -1
    if selector_class.rsplit(".", 1)[-1] != RACK_AWARE.rsplit(".", 1)[-1]:
        return -1
    if rack_of.get(leader_id) == client_rack:
        return -1
    for r in replicas:
        if r != leader_id and r in isr and r in live and rack_of.get(r) == client_rack:
            return r
    return -1
