"""Where a partition's leader is, for answers to clients that asked the wrong broker:
NOT_LEADER_OR_FOLLOWER with the current leader and its endpoint where the version allows
(KIP-951: Produce v10+, Fetch v16+),
so the client need not refresh metadata first."""

from __future__ import annotations

from kbroker.wire.errors import Errors


def partition_state(image, topic: str, index: int):
    t = image.topics_by_name.get(topic)
    return t.partitions.get(index) if t is not None else None


def not_served_here(image, topic: str, index: int) -> int:
    """The error for a partition this broker does not lead (or host)."""
    st = partition_state(image, topic, index)
    if st is None:
        return Errors.UNKNOWN_TOPIC_OR_PARTITION
    return Errors.NOT_LEADER_OR_FOLLOWER   # (also while it has no leader: clients retry)


def current_leader(image, topic: str, index: int) -> tuple[int, int]:
    st = partition_state(image, topic, index)
    return (st.leader, st.leader_epoch) if st is not None else (-1, -1)


def endpoint(image, broker_id: int, listener_name: str | None):
    """(host, port, rack) of ``broker_id`` on the client's listener, or None."""
    b = image.brokers.get(broker_id)
    if b is None or b.fenced:
        return None
    ep = b.endpoints.get(listener_name) if listener_name else None
    if ep is None:
        if not b.endpoints:
            return None
        ep = next(iter(b.endpoints.values()))
    return ep[0], ep[1], b.rack


def node_endpoints(image, leader_ids, listener_name, cls) -> list:
    """``cls(node_id=, host=, port=, rack=)`` for each distinct known leader."""
    out = []
    for lid in sorted({i for i in leader_ids if i >= 0}):
        ep = endpoint(image, lid, listener_name)
        if ep is not None:
            out.append(cls(node_id=lid, host=ep[0], port=ep[1], rack=ep[2]))
    return out
