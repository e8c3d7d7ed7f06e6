"""Fetch from the closest replica (KIP-392): which replica a consumer should read from.

With ``replica.selector.class`` set to the rack-aware selector (Kafka's class name
``org.apache.kafka.common.replica.RackAwareReplicaSelector`` names this one), a partition
leader answers a consumer Fetch (v11+) that carries ``client.rack`` (``rack_id``) with
``preferred_read_replica`` when a replica in the client's rack is better placed than itself,
and no records; the client then fetches from that follower, which serves reads up to the high
watermark it knows. Kafka's rules (ReplicaManager.findPreferredReadReplica and
RackAwareReplicaSelector):

* candidates: the leader and every ISR follower whose log end has reached the fetch offset;
* no client rack, or the leader in the client's rack: the leader (nothing is sent);
* otherwise the same-rack candidate with the highest log end, then the most recently caught up.

Pure: the caller passes ``now_ms``.
"""

from __future__ import annotations

RACK_AWARE = frozenset({"org.apache.kafka.common.replica.RackAwareReplicaSelector",
                        "kbroker.replication.replica_selector.RackAwareReplicaSelector"})
NO_PREFERENCE = -1


def rack_aware(selector_class: str | None) -> bool:
    return bool(selector_class) and selector_class.strip() in RACK_AWARE


def preferred_read_replica(leader_state, local_id: int, rack_of, client_rack: str | None,
                           fetch_offset: int, now_ms: int) -> int:
    """The replica a consumer in ``client_rack`` should fetch from, or NO_PREFERENCE (the
    leader). ``rack_of(broker_id) -> rack or None`` (fenced brokers: None, never chosen)."""
    if not client_rack or leader_state is None or rack_of(local_id) == client_rack:
        return NO_PREFERENCE
    best = None
    for f in leader_state.followers.values():
        if f.replica_id not in leader_state.isr or f.log_end_offset < fetch_offset:
            continue
        if rack_of(f.replica_id) != client_rack:
            continue
        key = (f.log_end_offset, -(now_ms - f.last_caught_up_ms))
        if best is None or key > best[0]:
            best = (key, f.replica_id)
    return best[1] if best is not None else NO_PREFERENCE
