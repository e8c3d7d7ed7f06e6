"""A tiny blocking Kafka client on kbroker's own codec, for ``kbroker groups``.

Just enough of the protocol for kafka-consumer-groups.sh's job: metadata, coordinator
lookup, list/describe/delete groups, committed offsets, log offsets, and admin commits.
"""
from __future__ import annotations

import itertools
import socket
import struct

from kbroker.wire.frame import decode_response, encode_request
from kbroker.wire.generated.consumer_group_describe_request import ConsumerGroupDescribeRequest
from kbroker.wire.generated.delete_groups_request import DeleteGroupsRequest
from kbroker.wire.generated.describe_groups_request import DescribeGroupsRequest
from kbroker.wire.generated.find_coordinator_request import FindCoordinatorRequest
from kbroker.wire.generated.list_groups_request import ListGroupsRequest
from kbroker.wire.generated.list_offsets_request import ListOffsetsRequest
from kbroker.wire.generated.metadata_request import MetadataRequest
from kbroker.wire.generated.offset_commit_request import OffsetCommitRequest
from kbroker.wire.generated.offset_fetch_request import OffsetFetchRequest

LATEST, EARLIEST = -1, -2


class KafkaError(Exception):
    def __init__(self, code: int, what: str):
        super().__init__(f"{what}: error code {code}")
        self.code = code


class _Conn:
    def __init__(self, host: str, port: int, timeout: float, client_id: str = "kbroker-groups"):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.client_id = client_id

    def _read(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            buf += chunk
        return bytes(buf)

    def call(self, corr: int, req, version: int):
        self.sock.sendall(encode_request(corr, self.client_id, req, version))
        size = struct.unpack(">i", self._read(4))[0]
        got, resp = decode_response(self._read(size), req.API_KEY, version)
        if got != corr:
            raise ConnectionError(f"correlation id {got}, expected {corr}")
        return resp

    def close(self):
        self.sock.close()


class AdminClient:
    def __init__(self, bootstrap: str, timeout: float = 30.0, client_id: str = "kbroker-groups"):
        self.client_id = client_id
        host, _, port = bootstrap.rpartition(":")
        self.bootstrap = (host or "127.0.0.1", int(port or 9092))
        self.timeout = timeout
        self._conns: dict[tuple[str, int], _Conn] = {}
        self._corr = itertools.count(1)
        self.brokers: dict[int, tuple[str, int]] = {}

    def close(self):
        for c in self._conns.values():
            c.close()
        self._conns.clear()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def call(self, req, version: int, addr: tuple[str, int] | None = None):
        addr = addr or self.bootstrap
        conn = self._conns.get(addr)
        if conn is None:
            conn = self._conns[addr] = _Conn(addr[0], addr[1], self.timeout, self.client_id)
        return conn.call(next(self._corr), req, version)

    # -- cluster ---------------------------------------------------------------------------

    def metadata(self, topics: list[str] | None = None):
        req = MetadataRequest(topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
                              allow_auto_topic_creation=False)
        resp = self.call(req, 12)
        self.brokers = {b.node_id: (b.host, b.port) for b in resp.brokers}
        return resp

    def partitions(self, topic: str) -> dict[int, int]:
        """partition -> leader node."""
        md = self.metadata([topic])
        t = md.topics[0]
        if t.error_code:
            raise KafkaError(t.error_code, f"topic {topic}")
        return {p.partition_index: p.leader_id for p in t.partitions}

    def coordinator(self, group_id: str) -> tuple[str, int]:
        return self.coordinator_node(group_id)[1:]

    def coordinator_node(self, group_id: str) -> tuple[int, str, int]:
        """(node id, host, port) of the group's coordinator."""
        for _ in range(20):
            resp = self.call(FindCoordinatorRequest(key=group_id, key_type=0), 3)
            if resp.error_code == 0:
                return resp.node_id, resp.host, resp.port
            if resp.error_code not in (14, 15):      # loading / not available: retry
                raise KafkaError(resp.error_code, f"FindCoordinator({group_id})")
            import time
            time.sleep(0.25)
        raise KafkaError(15, f"FindCoordinator({group_id})")

    # -- groups ------------------------------------------------------------------------------

    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None):
        self.metadata([])
        out = {}
        for addr in set(self.brokers.values()) or {self.bootstrap}:
            resp = self.call(ListGroupsRequest(states_filter=list(states or []), types_filter=list(types or [])), 5, addr)
            if resp.error_code:
                raise KafkaError(resp.error_code, "ListGroups")
            for g in resp.groups:
                out[g.group_id] = g
        return [out[k] for k in sorted(out)]

    def describe_group(self, group_id: str):
        resp = self.call(DescribeGroupsRequest(groups=[group_id]), 5, self.coordinator(group_id))
        g = resp.groups[0]
        if g.error_code:
            raise KafkaError(g.error_code, f"DescribeGroups({group_id})")
        return g

    def describe_consumer_group(self, group_id: str):
        resp = self.call(ConsumerGroupDescribeRequest(group_ids=[group_id]), 0, self.coordinator(group_id))
        return resp.groups[0]

    def committed(self, group_id: str) -> dict[tuple[str, int], tuple[int, str | None]]:
        resp = self.call(OffsetFetchRequest(group_id=group_id, topics=None), 7, self.coordinator(group_id))
        if resp.error_code:
            raise KafkaError(resp.error_code, f"OffsetFetch({group_id})")
        return {(t.name, p.partition_index): (p.committed_offset, p.metadata)
                for t in resp.topics for p in t.partitions if p.committed_offset >= 0}

    def commit(self, group_id: str, offsets: dict[tuple[str, int], int],
               retention_ms: int | None = None, member: tuple[str, int] | None = None,
               coordinator: tuple[str, int] | None = None) -> dict[tuple[str, int], int]:
        """Commit as a simple (memberless) group, or as ``member`` = (member id, member epoch)
        of a consumer group (OffsetCommit v9); ``retention_ms`` uses OffsetCommit v4's
        per-commit retention (gone from v5 on, where offsets.retention.minutes applies)."""
        by_topic: dict[str, list] = {}
        for (t, p), off in sorted(offsets.items()):
            by_topic.setdefault(t, []).append(OffsetCommitRequest.OffsetCommitRequestTopic.OffsetCommitRequestPartition(
                partition_index=p, committed_offset=off, committed_leader_epoch=-1, committed_metadata=""))
        member_id, epoch = member or ("", -1)
        req = OffsetCommitRequest(group_id=group_id, generation_id_or_member_epoch=epoch, member_id=member_id,
                                  group_instance_id=None, topics=[
                                      OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=ps)
                                      for t, ps in by_topic.items()])
        if retention_ms is not None:
            req.retention_time_ms = retention_ms
        version = 4 if retention_ms is not None else 9 if member else 8
        resp = self.call(req, version, coordinator or self.coordinator(group_id))
        return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}

    def delete_group(self, group_id: str) -> int:
        resp = self.call(DeleteGroupsRequest(groups_names=[group_id]), 2, self.coordinator(group_id))
        return resp.results[0].error_code

    # -- log offsets -------------------------------------------------------------------------

    def list_offsets(self, topic: str, spec: int, partitions: list[int] | None = None) -> dict[int, int]:
        """partition -> offset for a timestamp (or LATEST / EARLIEST); -1 if none."""
        leaders = self.partitions(topic)
        parts = sorted(leaders) if partitions is None else partitions
        by_leader: dict[int, list[int]] = {}
        for p in parts:
            by_leader.setdefault(leaders.get(p, -1), []).append(p)
        out = {}
        T = ListOffsetsRequest.ListOffsetsTopic
        for leader, ps in by_leader.items():
            addr = self.brokers.get(leader, self.bootstrap)
            req = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[T(name=topic, partitions=[
                T.ListOffsetsPartition(partition_index=p, current_leader_epoch=-1, timestamp=spec) for p in ps])])
            resp = self.call(req, 7, addr)
            for t in resp.topics:
                for p in t.partitions:
                    if p.error_code:
                        raise KafkaError(p.error_code, f"ListOffsets({topic}-{p.partition_index})")
                    out[p.partition_index] = p.offset
        return out
