"""State-change lines from committed metadata (``kbroker.state.change``, Kafka's
state.change.logger): every node logs leader changes, ISR shrinks/expands and broker
fencing as the records that decide them are applied, whoever wrote them.

It also counts ISR shrinks and expands of the partitions this node leads (Kafka's
IsrShrinksPerSec / IsrExpandsPerSec on the leader). The publisher keeps its own copy of each partition's leader and ISR (the image is already
updated when a publisher runs) to say what changed; it starts from the image it is attached to."""

from __future__ import annotations

import logging

from kbroker.logging_config import broker_fenced, isr_change, leader_change, state_change


class StateChangeLog:
    def __init__(self, image, node_id: int = -1, metrics=None) -> None:
        self.image = image
        self.node_id = node_id
        self.metrics = metrics            # RequestMetrics: ISR shrink/expand counters (as the leader counts them)
        self._seen: dict[tuple, tuple[int, tuple[int, ...]]] = {}
        self.reload(image)

    def reload(self, image) -> None:
        """Start over from ``image`` (attach time, and after the loader installs a snapshot)."""
        self._seen.clear()
        for t in image.topics_by_name.values():
            for p in t.partitions.values():
                self._seen[(t.topic_id, p.partition_id)] = (p.leader, tuple(p.isr))

    def __call__(self, rec, change, offset: int) -> None:
        name = type(rec).__name__
        if name in ("PartitionRecord", "PartitionChangeRecord"):
            self._partition(rec, name == "PartitionRecord")
        elif name in ("FenceBrokerRecord", "UnfenceBrokerRecord"):
            broker_fenced(rec.id, rec.epoch, name == "FenceBrokerRecord")
        elif name == "BrokerRegistrationChangeRecord" and rec.fenced in (1, -1):
            broker_fenced(rec.broker_id, rec.broker_epoch, rec.fenced == 1, "registration change")
        elif name == "RemoveTopicRecord":
            for key in [k for k in self._seen if k[0] == rec.topic_id]:
                del self._seen[key]

    def _partition(self, rec, created: bool) -> None:
        t = self.image.topics_by_id.get(rec.topic_id)
        p = t.partitions.get(rec.partition_id) if t is not None else None
        if p is None:
            return
        key = (rec.topic_id, rec.partition_id)
        old = self._seen.get(key)
        isr = tuple(p.isr)
        self._seen[key] = (p.leader, isr)
        if created or old is None:
            # DEBUG: creating a 10,000-partition topic must not write 10,000 INFO lines
            if state_change.isEnabledFor(logging.DEBUG):
                leader_change(t.name, p.partition_id, p.leader, p.leader_epoch, isr, "new partition", logging.DEBUG)
            return
        if old[0] != p.leader:
            leader_change(t.name, p.partition_id, p.leader, p.leader_epoch, isr, f"was {old[0]}")
        if old[1] != isr:
            isr_change(t.name, p.partition_id, old[1], isr)
            if self.metrics is not None and p.leader == self.node_id:
                if len(isr) < len(old[1]):
                    self.metrics.isr_shrinks += 1
                elif len(isr) > len(old[1]):
                    self.metrics.isr_expands += 1


def attach(server) -> None:
    pub = StateChangeLog(server.image, server.node_id, server.request_metrics)
    server.controller.publishers.append(pub)
    loader = getattr(server.controller, "loader", None)
    if loader is not None and hasattr(loader, "reloaders"):
        loader.reloaders.append(pub.reload)
