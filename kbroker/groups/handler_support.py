"""What the group handlers share: reaching the coordinator and describing the caller."""
from __future__ import annotations

from kbroker.clock import SYSTEM_CLOCK
from kbroker.groups import errors
from kbroker.groups.config import GroupConfig
from kbroker.groups.offsets import CommitPartition
from kbroker.groups.runtime import CoordinatorError, GroupCoordinatorRuntime


def coordinator(ctx) -> GroupCoordinatorRuntime:
    """The broker's group coordinator (``broker.groups``), started on first use if the broker
    assembly has not started it already."""
    broker = ctx.broker
    rt = getattr(broker, "groups", None)
    if rt is None:
        if getattr(broker, "replicas", None) is None:
            raise CoordinatorError(errors.COORDINATOR_NOT_AVAILABLE)
        rt = attach(broker)
    return rt


def attach(broker) -> GroupCoordinatorRuntime:
    """Create and start the coordinator for ``broker`` (needs a running event loop)."""
    clock = getattr(broker, "clock", None)
    if clock is None:
        clock = SYSTEM_CLOCK
    rt = GroupCoordinatorRuntime(broker, GroupConfig.from_broker(broker.config), clock.now_ms)
    broker.groups = rt
    rt.start()
    return rt


def client_host(ctx) -> str:
    peer = getattr(ctx.conn, "peer", None)
    if isinstance(peer, tuple) and peer:
        return f"/{peer[0]}"
    return "" if peer is None else f"/{peer}"


def known_partitions(ctx, topic: str) -> set[int] | None:
    """Partitions of ``topic`` in the metadata image, or None if it does not exist."""
    t = ctx.broker.image.topic(topic)
    return None if t is None else set(t.partitions)


class CommitAnswers:
    """The per-partition answers of an offset commit (OffsetCommit and TxnOffsetCommit).

    Partitions of unknown topics are answered UNKNOWN_TOPIC_OR_PARTITION at once; the rest
    are in ``valid`` as [(topic, [CommitPartition])] for the coordinator."""

    def __init__(self, ctx, topics, with_leader_epoch: bool):
        self.codes: dict[str, dict[int, int]] = {}
        self.valid: list[tuple[str, list[CommitPartition]]] = []
        for t in topics:
            known = known_partitions(ctx, t.name)
            rows = []
            for p in t.partitions:
                if known is None or p.partition_index not in known:
                    self.set(t.name, p.partition_index, errors.UNKNOWN_TOPIC_OR_PARTITION)
                else:
                    rows.append(CommitPartition(
                        p.partition_index, p.committed_offset,
                        p.committed_leader_epoch if with_leader_epoch else -1, p.committed_metadata))
            if rows:
                self.valid.append((t.name, rows))

    def set(self, topic: str, partition: int, code: int) -> None:
        self.codes.setdefault(topic, {})[partition] = code

    def fail_valid(self, code: int) -> None:
        """Answer every partition that reached the coordinator with ``code``."""
        for name, rows in self.valid:
            for cp in rows:
                self.set(name, cp.partition, code)

    def set_all(self, result) -> None:
        """Take the coordinator's [(topic, [(partition, code)])]."""
        for name, parts in result:
            for p, code in parts:
                self.set(name, p, code)
