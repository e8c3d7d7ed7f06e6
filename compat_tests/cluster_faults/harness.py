"""The fault harness: a KBrokerCluster whose nodes each have their own loopback address
(127.X.Y.<node id>, X.Y from our pid so that concurrent runs never share one) and open
their connections from it (node_main.py), plus the network faults between them
(network.py). kill -9, SIGSTOP/SIGCONT and restart come from KBrokerCluster.

    with FaultCluster(tmp_path, 3, overrides=...) as c:
        with c.isolate(1):            # node 1 cut off from nodes 2 and 3 (clients still reach it)
            ...
        with c.slow_links([1], [2, 3], rate_kbit=256):
            ...
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from pathlib import Path

from kbroker.net.client import ClientError, KafkaClient
from kbroker.wire.generated.list_offsets_request import ListOffsetsRequest
from kbroker.wire.generated.metadata_request import MetadataRequest

from compat_tests.brokers import KBrokerCluster
from compat_tests.cluster_faults.network import Network


def node_hosts(n: int) -> dict[int, str]:
    pid = os.getpid()
    return {i: f"127.{100 + (pid >> 8) % 100}.{pid % 256}.{i}" for i in range(1, n + 1)}


class FaultCluster(KBrokerCluster):
    def __init__(self, base_dir: Path, n: int = 3, **kw) -> None:
        super().__init__(base_dir, n, hosts=node_hosts(n), **kw)
        self.network = Network()

    def launcher(self, node) -> list[str]:
        return ["compat_tests.cluster_faults.node_main", node.host]

    def _hosts_of(self, ids) -> list[str]:
        return [self.nodes[i].host for i in ids]

    @contextlib.contextmanager
    def isolate(self, node_id: int):
        """Cut ``node_id`` off from every other node (brokers and controllers) in the block."""
        others = [i for i in self.nodes if i != node_id]
        with self.network.cut(self._hosts_of([node_id]), self._hosts_of(others)):
            yield

    @contextlib.contextmanager
    def cut(self, a: list[int], b: list[int]):
        with self.network.cut(self._hosts_of(a), self._hosts_of(b)):
            yield

    @contextlib.contextmanager
    def slow_links(self, a: list[int], b: list[int], rate_kbit: int = 256):
        with self.network.slow(self._hosts_of(a), self._hosts_of(b), rate_kbit):
            yield

    def close(self) -> None:
        """kill -9 every node (a fault test's data is thrown away: a graceful stop of all
        nodes at once only waits out controllers that are leaving too), remove our rules."""
        try:
            for n in self.nodes.values():
                n.signal(signal.SIGCONT)
                n.signal(signal.SIGKILL)
        finally:
            self.network.close()

    def log_end(self, node_id: int, topic: str, partition: int, timeout_s: float = 5.0) -> int | None:
        """The log end offset of ``node_id``'s replica (ListOffsets latest with the debugging
        replica id -2, which any replica answers with its own log end); None if the node does
        not answer or has no such replica."""
        L = ListOffsetsRequest.ListOffsetsTopic
        req = ListOffsetsRequest(replica_id=-2, topics=[L(name=topic, partitions=[
            L.ListOffsetsPartition(partition_index=partition, timestamp=-1, current_leader_epoch=-1)])])
        r = self._ask(node_id, req, timeout_s)
        p = r.topics[0].partitions[0] if r is not None else None
        return p.offset if p is not None and p.error_code == 0 else None

    def leader_seen_by(self, node_id: int, topic: str, partition: int, timeout_s: float = 5.0) -> int | None:
        """The leader of a partition in ``node_id``'s own metadata (None: no answer)."""
        seen = self.partitions_seen_by(node_id, topic, timeout_s).get(partition)
        return seen[0] if seen is not None else None

    def partitions_seen_by(self, node_id: int, topic: str, timeout_s: float = 5.0) -> dict:
        """partition -> (leader, leader epoch, sorted ISR) in ``node_id``'s own metadata, which
        may be stale (a node cut off or paused until it caught up); {} if it does not answer."""
        r = self._ask(node_id, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=topic)]),
                      timeout_s)
        return {p.partition_index: (p.leader_id, p.leader_epoch, sorted(p.isr_nodes))
                for t in (r.topics if r is not None else []) for p in t.partitions if p.error_code == 0}

    def converged(self, topic: str, partitions: int) -> dict | None:
        """Every node answers with the same leader, leader epoch and a full ISR for every
        partition: partition -> leader, else None. (Asking any one node is not enough after a
        fault: the victim serves its stale view until it has caught up.)"""
        views = [self.partitions_seen_by(n, topic) for n in self.nodes]
        first = views[0]
        if len(first) != partitions or any(v != first for v in views[1:]) or \
                any(len(isr) != len(self.nodes) for _, _, isr in first.values()):
            return None
        return {p: leader for p, (leader, _, _) in first.items()}

    def _ask(self, node_id: int, request, timeout_s: float):
        node = self.nodes[node_id]
        if node.pid is None:
            return None

        async def ask():
            c = KafkaClient(node.host, node.port, request_timeout_ms=int(timeout_s * 1000),
                            connect_timeout_ms=int(timeout_s * 1000))
            try:
                return await c.send(request)
            except (ClientError, OSError, asyncio.TimeoutError):
                return None
            finally:
                await c.close()
        return asyncio.run(ask())
